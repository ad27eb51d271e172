package gemma4_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/gemma4"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/vision"
)

// visionText is the language model the vision tests use: TinyGemma4 in the multimodal
// layout (model_type gemma4), as E2B and E4B are: per-layer embeddings, a sliding window
// of 8, its last two layers KV-shared (one sliding, one full), which apply the image mask
// over their source layers' keys and values.
func visionText() randmodel.Config {
	c := randmodel.TinyGemma4(256)
	c.Arch, c.DoubleWideMLP = "gemma4", false
	return c
}

// visionModel writes visionText with a random TinyGemma4Vision tower in mlx-vlm's layout
// and loads it on the CPU backend.
func visionModel(t testing.TB, v randmodel.Gemma4Vision) *model.Model {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "gemma4v")
	if err := randmodel.Generate(dir, visionText(), randmodel.Options{Seed: 7}); err != nil {
		t.Fatal(err)
	}
	if err := randmodel.AddGemma4Vision(dir, v, 11, false); err != nil {
		t.Fatal(err)
	}
	return loadVision(t, dir)
}

// loadVision loads the checkpoint in dir on the CPU backend and checks its tower is bound.
func loadVision(t testing.TB, dir string) *model.Model {
	t.Helper()
	m, err := model.Load(dir, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if m.Vision() == nil || !model.HasVision(dir) {
		t.Fatal("the checkpoint's tower was not loaded")
	}
	return m
}

// testImage is a w×h image whose pixels depend on seed.
func testImage(w, h int, seed uint8) vision.Image {
	m := vision.NewRGB(w, h)
	for i := range m.Pix {
		m.Pix[i] = uint8(i*7+int(seed)*31) ^ seed
	}
	return vision.NewImage(m)
}

// towerRef is transformers' Gemma 4 image features (Gemma4VisionModel, then
// Gemma4MultimodalEmbedder) in float64 from the checkpoint's tensors, for one image's
// patch rows in the processor's order (row-major over a gh×gw grid), computed as the
// modules state them: no reordering of patches, the 2D RoPE on each head's halves, the
// pooling as a mean over each window.
func towerRef(t *testing.T, dir string, v randmodel.Gemma4Vision, px *vision.Pixels, text int) []float64 {
	t.Helper()
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	get := func(name string) []float64 {
		tt, ok := ck.Tensor(name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		f, err := tt.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float64, len(f))
		for i, x := range f {
			out[i] = float64(x)
		}
		return out
	}
	H, hd, heads := v.Hidden, v.HeadDim, v.Heads
	gh, gw := px.Grid[1], px.Grid[2]
	N, in := gh*gw, px.Cols
	lin := func(x []float64, w []float64, o int) []float64 {
		out := make([]float64, o)
		for j := range o {
			var s float64
			for i, a := range x {
				s += w[j*len(x)+i] * a
			}
			out[j] = s
		}
		return out
	}
	rms := func(x, w []float64) []float64 {
		var ms float64
		for _, a := range x {
			ms += a * a
		}
		inv := 1 / math.Sqrt(ms/float64(len(x))+v.Eps)
		out := make([]float64, len(x))
		for i, a := range x {
			out[i] = a * inv
			if w != nil {
				out[i] *= w[i]
			}
		}
		return out
	}
	p := "vision_tower."
	wIn, tab := get(p+"patch_embedder.input_proj.weight"), get(p+"patch_embedder.position_embedding_table")
	x := make([][]float64, N)
	for r := range N {
		row := make([]float64, in)
		for j := range in {
			row[j] = 2 * (float64(px.Values[r*in+j]) - 0.5)
		}
		x[r] = lin(row, wIn, H)
		cx, cy := r%gw, r/gw
		for e := range H {
			x[r][e] += tab[cx*H+e] + tab[(v.PosSize+cy)*H+e]
		}
	}
	// rope rotates a head (hd values) of the patch at column cx, row cy.
	rope := func(hv []float64, cx, cy int) {
		half, q := hd/2, hd/4
		for part, pos := range []int{cx, cy} {
			seg := hv[part*half : (part+1)*half]
			rot := make([]float64, half)
			for j := range q {
				a := float64(pos) / math.Pow(100, float64(2*j)/float64(half))
				c, s := math.Cos(a), math.Sin(a)
				rot[j] = seg[j]*c - seg[j+q]*s
				rot[j+q] = seg[j+q]*c + seg[j]*s
			}
			copy(seg, rot)
		}
	}
	// clip is Gemma4ClippableLinear's clamp of a linear's input or output (bounds read from
	// the checkpoint when it clips).
	clip := func(x []float64, name, lo, hi string) []float64 {
		if !v.Clipped {
			return x
		}
		l, h := get(name + "." + lo)[0], get(name + "." + hi)[0]
		out := make([]float64, len(x))
		for i, a := range x {
			out[i] = min(max(a, l), h)
		}
		return out
	}
	clin := func(x []float64, name string, o int) []float64 {
		return clip(lin(clip(x, name, "input_min", "input_max"), get(name+".linear.weight"), o), name, "output_min", "output_max")
	}
	gelu := func(a float64) float64 {
		return 0.5 * a * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(a+0.044715*a*a*a)))
	}
	for i := range v.Layers {
		l := p + "encoder.layers." + itoa(i) + "."
		qn, kn := get(l+"self_attn.q_norm.weight"), get(l+"self_attn.k_norm.weight")
		Q, K, V := make([][]float64, N), make([][]float64, N), make([][]float64, N)
		for r := range N {
			a := rms(x[r], get(l+"input_layernorm.weight"))
			Q[r], K[r], V[r] = clin(a, l+"self_attn.q_proj", heads*hd), clin(a, l+"self_attn.k_proj", heads*hd), clin(a, l+"self_attn.v_proj", heads*hd)
			for hh := range heads {
				s := hh * hd
				copy(Q[r][s:s+hd], rms(Q[r][s:s+hd], qn))
				copy(K[r][s:s+hd], rms(K[r][s:s+hd], kn))
				copy(V[r][s:s+hd], rms(V[r][s:s+hd], nil))
				rope(Q[r][s:s+hd], r%gw, r/gw)
				rope(K[r][s:s+hd], r%gw, r/gw)
			}
		}
		next := make([][]float64, N)
		for r := range N {
			att := make([]float64, heads*hd)
			for hh := range heads {
				s := hh * hd
				sc := make([]float64, N)
				mx := math.Inf(-1)
				for c := range N {
					var d float64
					for j := range hd {
						d += Q[r][s+j] * K[c][s+j]
					}
					sc[c] = d
					mx = max(mx, d)
				}
				var z float64
				for c := range N {
					sc[c] = math.Exp(sc[c] - mx)
					z += sc[c]
				}
				for c := range N {
					for j := range hd {
						att[s+j] += sc[c] / z * V[c][s+j]
					}
				}
			}
			o := rms(clin(att, l+"self_attn.o_proj", H), get(l+"post_attention_layernorm.weight"))
			hrow := make([]float64, H)
			for e := range H {
				hrow[e] = x[r][e] + o[e]
			}
			f := rms(hrow, get(l+"pre_feedforward_layernorm.weight"))
			g, u := clin(f, l+"mlp.gate_proj", v.Intermediate), clin(f, l+"mlp.up_proj", v.Intermediate)
			for j := range g {
				g[j] = gelu(g[j]) * u[j]
			}
			m := rms(clin(g, l+"mlp.down_proj", H), get(l+"post_feedforward_layernorm.weight"))
			for e := range H {
				hrow[e] += m[e]
			}
			next[r] = hrow
		}
		x = next
	}
	k := v.Pool
	proj := get("embed_vision.embedding_projection.weight")
	var sb, ss []float64
	if v.Standardize {
		sb, ss = get(p+"std_bias"), get(p+"std_scale")
	}
	var out []float64
	for ty := range gh / k {
		for tx := range gw / k {
			pooled := make([]float64, H)
			for dy := range k {
				for dx := range k {
					for e := range H {
						pooled[e] += x[(ty*k+dy)*gw+tx*k+dx][e]
					}
				}
			}
			for e := range H {
				pooled[e] = pooled[e] / float64(k*k) * math.Sqrt(float64(H))
				if sb != nil {
					pooled[e] = (pooled[e] - sb[e]) * ss[e]
				}
			}
			out = append(out, lin(rms(pooled, nil), proj, text)...)
		}
	}
	return out
}

func itoa(i int) string { return string(rune('0' + i)) }

// TestTowerReference: the tower and projector on the CPU backend compute what a plain
// float64 reference of transformers' modules computes from the same tensors, for images
// of odd sizes and aspect ratios (each its own grid); images encoded together give each
// one's features alone, bit for bit.
func TestTowerReference(t *testing.T) {
	for _, clipped := range []bool{false, true} {
		v := randmodel.TinyGemma4Vision()
		v.Clipped = clipped
		t.Run(map[bool]string{false: "plain", true: "clipped"}[clipped], func(t *testing.T) { testTowerReference(t, v) })
	}
}

// testTowerReference is TestTowerReference for a tower of shape v.
func testTowerReference(t *testing.T, v randmodel.Gemma4Vision) {
	m := visionModel(t, v)
	imgs := []vision.Image{testImage(37, 21, 1), testImage(32, 32, 2), testImage(13, 90, 3)}
	both, err := m.EncodeImages(context.Background(), imgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, im := range imgs {
		px, err := m.Vision().Processor().Process(im.RGB)
		if err != nil {
			t.Fatal(err)
		}
		want := towerRef(t, m.Dir, v, px, m.Config.HiddenSize)
		got := both[i]
		th, tw := px.Grid[1]/v.Pool, px.Grid[2]/v.Pool
		if got.Grid != [3]int{1, th, tw} || len(got.Rows) != len(want) || th*tw != m.Vision().Processor().ImageTokens(im.W, im.H) {
			t.Fatalf("image %d: grid %v, %d values; want %d×%d tokens of %d", i, got.Grid, len(got.Rows), th, tw, m.Config.HiddenSize)
		}
		var num, den float64
		for j := range want {
			num = max(num, math.Abs(float64(got.Rows[j])-want[j]))
			den = max(den, math.Abs(want[j]))
		}
		if num/den > 1e-4 {
			t.Errorf("image %d: features differ from the reference by %.3g (relative to the largest)", i, num/den)
		}
		alone, err := m.EncodeImages(context.Background(), []vision.Image{im})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(alone[0].Rows, got.Rows) {
			t.Errorf("image %d: batched features differ from alone (%.3g)", i, modeltest.MaxRel(alone[0].Rows, got.Rows))
		}
	}
	if slices.Equal(both[0].Rows[:32], both[1].Rows[:32]) {
		t.Error("different images gave the same features")
	}
}

// TestVisionMemory: the memory plan's tower figures (model.VisionMemoryOf) are the tower's
// tensor bytes (vision_tower.*), the processor's largest image in patches and its
// max_soft_tokens features times the feature cache's images; the estimate of the CPU backend's
// buffers while encoding an image bounds what the backend counts it held at once
// (ActivationPeak) without being more than 1.5 times it, for the tiny tower and a wider one;
// several images encode in passes, so their peak is not their sum.
func TestVisionMemory(t *testing.T) {
	tiny := randmodel.TinyGemma4Vision()
	tiny.MaxSoftTokens = 280 // 1,120 patches
	wide := tiny
	wide.Hidden, wide.Intermediate, wide.Heads, wide.KVHeads, wide.HeadDim, wide.Layers = 128, 512, 4, 4, 32, 3
	for _, v := range []randmodel.Gemma4Vision{tiny, wide} {
		m := visionModel(t, v)
		vm, err := model.VisionMemoryOf(m.Dir)
		if err != nil {
			t.Fatal(err)
		}
		h, err := safetensors.ReadHeader(filepath.Join(m.Dir, "vision.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		var weights int64
		for _, tn := range h.Tensors {
			if strings.HasPrefix(tn.Name, "vision_tower.") {
				weights += tn.End - tn.Begin
			}
		}
		patches := v.MaxSoftTokens * v.Pool * v.Pool
		features := int64(4 * v.MaxSoftTokens * m.Config.HiddenSize)
		if vm.Weights != weights || vm.MaxPatches != patches || vm.Features != min(model.FeatureCacheBytes, model.FeatureCacheImages*features) || vm.Encode <= 0 {
			t.Fatalf("%+v; want weights %d, %d patches, features %d", vm, weights, patches, model.FeatureCacheImages*features)
		}
		vc := gemma4.VisionConfig{Hidden: v.Hidden, Intermediate: v.Intermediate, Layers: v.Layers, Heads: v.Heads, KVHeads: v.KVHeads,
			HeadDim: v.HeadDim, Patch: v.Patch, PosSize: v.PosSize, Pool: v.Pool, Eps: v.Eps, Act: v.Act, Standardize: v.Standardize}
		be := m.Backend().(*cpu.Backend)
		measure := func(images ...vision.Image) int64 {
			be.ActivationPeak() // from here
			if _, err := m.EncodeImages(context.Background(), images); err != nil {
				t.Fatal(err)
			}
			return be.ActivationPeak()
		}
		im := testImage(300, 200, 4)
		px, err := m.Vision().Processor().Process(im.RGB)
		if err != nil {
			t.Fatal(err)
		}
		buffers := gemma4.EncodeBuffers(vc, px.Rows, px.Rows/(v.Pool*v.Pool), m.Config.HiddenSize)
		one := measure(im)
		t.Logf("%d×%d tower, one image (%d patches): the backend held at most %d bytes, estimated %d (%.2f×)",
			v.Layers, v.Hidden, px.Rows, one, buffers, float64(buffers)/float64(one))
		if buffers < one || buffers > one+one/2 {
			t.Errorf("estimate %d bytes for a peak of %d", buffers, one)
		}
		if three := measure(testImage(300, 200, 5), testImage(300, 200, 6), testImage(300, 200, 7)); three > one+one/10 {
			t.Errorf("three images: a peak of %d bytes, one's %d: not encoded in passes of one", three, one)
		}
	}
}

// TestEncodeTime logs the time to preprocess and encode one 1024×768 image on the CPU backend
// (2 threads) with a tower of Gemma 4's geometry (16-pixel patches pooled 3×3, 280 tokens at
// most: 2,394 patches and 266 tokens for this image) and a tiny width (2 layers of 32), or
// with MLXG_ENCODE_WIDE=1 one layer of the released towers' width (768, 12 heads of 64, an
// MLP of 3,072), whose time times num_hidden_layers (16) is the tower's but for the pooling.
func TestEncodeTime(t *testing.T) {
	v := randmodel.TinyGemma4Vision()
	v.Patch, v.Pool, v.MaxSoftTokens, v.PosSize = 16, 3, 280, 10240
	if os.Getenv("MLXG_ENCODE_WIDE") == "1" {
		v.Hidden, v.Intermediate, v.Heads, v.KVHeads, v.HeadDim, v.Layers = 768, 3072, 12, 12, 64, 1
	}
	m := visionModel(t, v)
	im := testImage(1024, 768, 4)
	start := time.Now()
	if _, err := m.Vision().Processor().Process(im.RGB); err != nil {
		t.Fatal(err)
	}
	pre := time.Since(start)
	start = time.Now()
	sp, err := m.EncodeImages(context.Background(), []vision.Image{im})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if sp[0].N() != 266 {
		t.Fatalf("%d tokens, want 266", sp[0].N())
	}
	t.Logf("1024×768 on the CPU backend (2 threads), tower of %d layers × %d wide: 2394 patches, %d tokens in %v (preprocessing alone %v)",
		v.Layers, v.Hidden, sp[0].N(), took.Round(time.Millisecond), pre.Round(time.Millisecond))
}
