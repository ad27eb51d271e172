package gemma4_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
)

// refText is the language model of TestImageLogitsReference: TinyGemma4's attention in
// three layers (two sliding over a window of 8, shorter than an image, then a full one of
// global_head_dim with proportional RoPE) without per-layer embeddings or KV-shared layers.
func refText() randmodel.Config {
	c := visionText()
	c.NumLayers, c.PerLayerInput, c.KVSharedLayers = 3, 0, 0
	return c
}

// sharedRefText is refText's attention in TinyGemma4's six layers (sliding, sliding, full,
// sliding), the last two KV-shared (a sliding one reading layer 3, a full one reading
// layer 2), their MLPs double wide, as E2B's and E4B's are.
func sharedRefText() randmodel.Config {
	c := visionText()
	c.PerLayerInput, c.DoubleWideMLP = 0, true
	return c
}

// imageMask is where lmRef applies use_bidirectional_attention "vision"'s image mask.
type imageMask int

const (
	noMask      imageMask = iota // every layer causal
	everyLayer                   // transformers: every layer, the KV-shared ones too
	ownKVLayers                  // only the layers with keys and values of their own
)

// lmRef is transformers' Gemma 4 language model in float64 over input rows (token ids, or
// for image rows their features, unscaled), every row's logits, with the image mask of
// use_bidirectional_attention "vision" on the layers mask names: an image's rows see each
// other in both directions, beside the causal (on sliding layers windowed) mask. A
// KV-shared layer (the last num_kv_shared_layers) projects its own queries and attends
// over the keys and values of the last earlier layer of its kind.
func lmRef(t *testing.T, dir string, c randmodel.Config, ids []int32, md *model.Media, mask imageMask) [][]float64 {
	t.Helper()
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	get := func(name string) []float64 {
		tt, ok := ck.Tensor("model.language_model." + name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		f, _ := tt.Float32s()
		out := make([]float64, len(f))
		for i, x := range f {
			out[i] = float64(x)
		}
		return out
	}
	H, nh, nkv := c.HiddenSize, c.NumHeads, c.NumKVHeads
	T := len(ids)
	embed := get("embed_tokens.weight")
	x := make([][]float64, T)
	group := make([]int, T)
	for i, id := range ids {
		group[i] = -1
		x[i] = make([]float64, H)
		if s, k, ok := md.At(i); ok {
			for e := range H {
				x[i][e] = float64(s.Rows[k*H+e])
			}
			group[i] = s.Start
			continue
		}
		for e := range H {
			x[i][e] = embed[int(id)*H+e] * math.Sqrt(float64(H))
		}
	}
	rms := func(in, w []float64) []float64 {
		var ms float64
		for _, a := range in {
			ms += a * a
		}
		inv := 1 / math.Sqrt(ms/float64(len(in))+c.RMSNormEps)
		out := make([]float64, len(in))
		for i, a := range in {
			out[i] = a * inv
			if w != nil {
				out[i] *= w[i]
			}
		}
		return out
	}
	mat := func(in, w []float64, o int) []float64 {
		out := make([]float64, o)
		for j := range o {
			var s float64
			for i, a := range in {
				s += w[j*len(in)+i] * a
			}
			out[j] = s
		}
		return out
	}
	// rope turns a head of hd values at position p in the rotate-half layout: the first
	// `turn` frequency pairs by base^(-2j/hd), the rest (proportional RoPE's) not at all.
	rope := func(v []float64, p int, base float64, turn int) {
		hd := len(v)
		for j := range turn {
			a := float64(p) / math.Pow(base, float64(2*j)/float64(hd))
			cs, sn := math.Cos(a), math.Sin(a)
			x1, x2 := v[j], v[j+hd/2]
			v[j], v[j+hd/2] = x1*cs-x2*sn, x2*cs+x1*sn
		}
	}
	// Layer l slides unless every SlidingWindowPattern-th or the last (randmodel's layout).
	isSliding := func(l int) bool {
		return (l+1)%c.SlidingWindowPattern != 0 && l != c.NumLayers-1
	}
	firstShared := c.NumLayers - c.KVSharedLayers
	keys, values := make([][][]float64, c.NumLayers), make([][][]float64, c.NumLayers)
	for l := range c.NumLayers {
		p := fmt.Sprintf("layers.%d.", l)
		sliding := isSliding(l)
		hd, base, turn := c.HeadDim, c.RopeLocalBaseFreq, c.HeadDim/2
		if !sliding {
			hd, base = c.GlobalHeadDim, c.RopeTheta
			turn = int(c.PartialRotary * float64(hd) / 2)
		}
		wq, wo, qn := get(p+"self_attn.q_proj.weight"), get(p+"self_attn.o_proj.weight"), get(p+"self_attn.q_norm.weight")
		Q := make([][]float64, T)
		for i := range T {
			Q[i] = mat(rms(x[i], get(p+"input_layernorm.weight")), wq, nh*hd)
			for h := range nh {
				copy(Q[i][h*hd:(h+1)*hd], rms(Q[i][h*hd:(h+1)*hd], qn))
				rope(Q[i][h*hd:(h+1)*hd], i, base, turn)
			}
		}
		if l < firstShared {
			wk, wv, kn := get(p+"self_attn.k_proj.weight"), get(p+"self_attn.v_proj.weight"), get(p+"self_attn.k_norm.weight")
			K, V := make([][]float64, T), make([][]float64, T)
			for i := range T {
				a := rms(x[i], get(p+"input_layernorm.weight"))
				K[i], V[i] = mat(a, wk, nkv*hd), mat(a, wv, nkv*hd)
				for h := range nkv {
					copy(K[i][h*hd:(h+1)*hd], rms(K[i][h*hd:(h+1)*hd], kn))
					rope(K[i][h*hd:(h+1)*hd], i, base, turn)
					copy(V[i][h*hd:(h+1)*hd], rms(V[i][h*hd:(h+1)*hd], nil))
				}
			}
			keys[l], values[l] = K, V
		} else {
			src := -1
			for j := firstShared - 1; j >= 0 && src < 0; j-- {
				if isSliding(j) == sliding {
					src = j
				}
			}
			if src < 0 {
				t.Fatalf("layer %d shares the KV of no earlier layer", l)
			}
			keys[l], values[l] = keys[src], values[src]
		}
		K, V := keys[l], values[l]
		bidi := mask == everyLayer || (mask == ownKVLayers && l < firstShared)
		sees := func(i, j int) bool {
			causal := j <= i && (!sliding || i-j < c.SlidingWindow)
			return causal || (bidi && group[i] >= 0 && group[i] == group[j])
		}
		scalar := get(p + "layer_scalar")[0]
		next := make([][]float64, T)
		for i := range T {
			att := make([]float64, nh*hd)
			for h := range nh {
				g := h / (nh / nkv)
				sc := make([]float64, T)
				mx := math.Inf(-1)
				for j := range T {
					if !sees(i, j) {
						continue
					}
					var d float64
					for e := range hd {
						d += Q[i][h*hd+e] * K[j][g*hd+e]
					}
					sc[j] = d
					mx = max(mx, d)
				}
				var z float64
				for j := range T {
					if sees(i, j) {
						sc[j] = math.Exp(sc[j] - mx)
						z += sc[j]
					}
				}
				for j := range T {
					if sees(i, j) {
						for e := range hd {
							att[h*hd+e] += sc[j] / z * V[j][g*hd+e]
						}
					}
				}
			}
			o := rms(mat(att, wo, H), get(p+"post_attention_layernorm.weight"))
			hrow := make([]float64, H)
			for e := range H {
				hrow[e] = x[i][e] + o[e]
			}
			f := rms(hrow, get(p+"pre_feedforward_layernorm.weight"))
			gw := get(p + "mlp.gate_proj.weight")
			gt, up := mat(f, gw, len(gw)/H), mat(f, get(p+"mlp.up_proj.weight"), len(gw)/H) // double wide on use_double_wide_mlp's shared layers
			for j := range gt {
				a := gt[j]
				gt[j] = 0.5 * a * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(a+0.044715*a*a*a))) * up[j]
			}
			m := rms(mat(gt, get(p+"mlp.down_proj.weight"), H), get(p+"post_feedforward_layernorm.weight"))
			for e := range H {
				hrow[e] = (hrow[e] + m[e]) * scalar
			}
			next[i] = hrow
		}
		x = next
	}
	out := make([][]float64, T)
	for i := range T {
		lg := mat(rms(x[i], get("norm.weight")), embed, c.VocabSize)
		if c.FinalLogitSoftcapping > 0 {
			for j, v := range lg {
				lg[j] = c.FinalLogitSoftcapping * math.Tanh(v/c.FinalLogitSoftcapping)
			}
		}
		out[i] = lg
	}
	return out
}

// TestImageLogitsReference: every row's logits of a prompt with two images (each longer than
// the sliding window) match a float64 reference of transformers' language model with the
// image mask, and are far from the same reference without it (so dropping the mask fails);
// with KV-shared layers also far from the reference whose shared layers drop the mask, and
// a prefill in passes that end between and inside the images gives the one pass's rows.
func TestImageLogitsReference(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    randmodel.Config
	}{{"own KV", refText()}, {"KV-shared", sharedRefText()}} {
		t.Run(tc.name, func(t *testing.T) { testImageLogitsReference(t, tc.c, cpu.New(2)) })
	}
}

// testImageLogitsReference is TestImageLogitsReference for the language model c on
// backend b (a fresh one: MLX's wraps the model's weights).
func testImageLogitsReference(t *testing.T, c randmodel.Config, b compute.Backend) {
	dir := filepath.Join(t.TempDir(), "gemma4v")
	if err := randmodel.Generate(dir, c, randmodel.Options{Seed: 8}); err != nil {
		t.Fatal(err)
	}
	if err := randmodel.AddGemma4Vision(dir, randmodel.TinyGemma4Vision(), 12, false); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Vision() == nil {
		t.Fatalf("the tower was not bound on %s", b.Name())
	}
	ids, md := imagePrompt(t, m, testImage(24, 20, 1), testImage(20, 28, 2))
	got := forward(t, m, ids, md)
	rel := func(b [][]float64) float64 {
		var num, den float64
		V := len(b[0])
		for i, row := range b {
			for j, v := range row {
				num = max(num, math.Abs(float64(got[i*V+j])-v))
				den = max(den, math.Abs(v))
			}
		}
		return num / den
	}
	r, rc := rel(lmRef(t, dir, c, ids, md, everyLayer)), rel(lmRef(t, dir, c, ids, md, noMask))
	t.Logf("%d rows: within %.2g of the reference with the image mask, %.2g of the one without", len(ids), r, rc)
	if r > 1e-3 {
		t.Errorf("logits differ from the reference with the image mask by %.3g", r)
	}
	if rc < 10*r || rc < 1e-2 {
		t.Errorf("logits are within %.3g of the reference without the image mask", rc)
	}
	if c.KVSharedLayers > 0 {
		rs := rel(lmRef(t, dir, c, ids, md, ownKVLayers))
		t.Logf("%.2g of the reference whose %d KV-shared layers attend causally", rs, c.KVSharedLayers)
		if rs < 10*r || rs < 1e-2 {
			t.Errorf("logits are within %.3g of the reference whose KV-shared layers drop the image mask", rs)
		}
	}
	// Prefill in passes: up to the first image, the first image and the text after it,
	// then the rest; and a resumption inside the second image after truncating the caches
	// (a prefix hit that ends inside an image).
	V := m.Config.VocabSize
	second := md.Spans[1].Start
	caches, err := m.NewCaches(true)
	if err != nil {
		t.Fatal(err)
	}
	model.SetMedia(caches, md)
	defer model.SetMedia(caches, nil)
	var parts []float32
	for _, cut := range [][2]int{{0, md.Spans[0].Start}, {md.Spans[0].Start, second - 1}, {second - 1, len(ids)}} {
		out, err := m.Forward(context.Background(), ids[cut[0]:cut[1]], caches, true)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, out...)
	}
	if d := rowDiff(parts, got, V, 0, len(ids)); d > 1e-4 {
		t.Errorf("a prefill in three passes differs from the one pass by %.3g", d)
	}
	resume := second + 2
	for _, l := range caches {
		if err := l.Truncate(resume); err != nil {
			t.Fatal(err)
		}
	}
	rest, err := m.Forward(context.Background(), ids[resume:], caches, true)
	if err != nil {
		t.Fatal(err)
	}
	if d := rowDiff(rest, got[resume*V:], V, 0, len(ids)-resume); d > 1e-4 {
		t.Errorf("a prefill resumed inside the second image differs from the one pass by %.3g", d)
	}
}
