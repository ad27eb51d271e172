package gemma3_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// lmRef is transformers' Gemma 3 language model in float64 over input rows (token ids, or
// for image rows their features, unscaled), every row's logits, with the image mask of
// create_causal_mask_mapping when bidi is set: an image's rows see each other in both
// directions on every layer, beside the causal (and on sliding layers windowed) mask.
func lmRef(t *testing.T, m *model.Model, ids []int32, md *model.Media, bidi bool) [][]float64 {
	t.Helper()
	c := randmodel.TinyGemma3(256)
	get := modeltest.Float64s(t, m.Dir, "language_model.model.")
	H, hd, nh, nkv, I := c.HiddenSize, c.HeadDim, c.NumHeads, c.NumKVHeads, c.IntermediateSize
	T := len(ids)
	embed := get("embed_tokens.weight")
	x, group := modeltest.Rows64(ids, md, embed, H, math.Sqrt(float64(H)))
	rms := func(in, w []float64) []float64 {
		var ms float64
		for _, a := range in {
			ms += a * a
		}
		inv := 1 / math.Sqrt(ms/float64(len(in))+float64(c.RMSNormEps))
		out := make([]float64, len(in))
		for i, a := range in {
			out[i] = a * inv * (1 + w[i])
		}
		return out
	}
	mat := modeltest.Mat64
	rope := func(v []float64, pos int, theta float64) {
		half := hd / 2
		for j := range half {
			a := float64(pos) * math.Pow(theta, -float64(2*j)/float64(hd))
			x0, x1 := v[j], v[j+half]
			v[j], v[j+half] = x0*math.Cos(a)-x1*math.Sin(a), x1*math.Cos(a)+x0*math.Sin(a)
		}
	}
	gelu := func(a float64) float64 { return 0.5 * a * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(a+0.044715*a*a*a))) }
	for l := range c.NumLayers {
		p := fmt.Sprintf("layers.%d.", l)
		w := func(n string) []float64 { return get(p + n) }
		sliding := (l+1)%c.SlidingWindowPattern != 0
		theta := c.RopeTheta
		if sliding {
			theta = c.RopeLocalBaseFreq
		}
		q, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		for i := range T {
			y := rms(x[i], w("input_layernorm.weight"))
			q[i], k[i], v[i] = mat(y, w("self_attn.q_proj.weight"), nh*hd), mat(y, w("self_attn.k_proj.weight"), nkv*hd), mat(y, w("self_attn.v_proj.weight"), nkv*hd)
			for h := range nh {
				copy(q[i][h*hd:], rms(q[i][h*hd:(h+1)*hd], w("self_attn.q_norm.weight")))
				rope(q[i][h*hd:(h+1)*hd], i, theta)
			}
			for h := range nkv {
				copy(k[i][h*hd:], rms(k[i][h*hd:(h+1)*hd], w("self_attn.k_norm.weight")))
				rope(k[i][h*hd:(h+1)*hd], i, theta)
			}
		}
		sees := func(i, j int) bool {
			if j <= i && (!sliding || j > i-c.SlidingWindow) {
				return true
			}
			return bidi && group[i] >= 0 && group[i] == group[j]
		}
		att := modeltest.Attention64(q, k, v, nh, nkv, hd, math.Sqrt(c.QueryPreAttnScalar), sees)
		next := make([][]float64, T)
		for i := range T {
			o := rms(mat(att[i], w("self_attn.o_proj.weight"), H), w("post_attention_layernorm.weight"))
			h := make([]float64, H)
			for e := range H {
				h[e] = x[i][e] + o[e]
			}
			y := rms(h, w("pre_feedforward_layernorm.weight"))
			g, u := mat(y, w("mlp.gate_proj.weight"), I), mat(y, w("mlp.up_proj.weight"), I)
			for e := range g {
				g[e] = gelu(g[e]) * u[e]
			}
			f := rms(mat(g, w("mlp.down_proj.weight"), H), w("post_feedforward_layernorm.weight"))
			for e := range H {
				h[e] += f[e]
			}
			next[i] = h
		}
		x = next
	}
	out := make([][]float64, T)
	for i := range T {
		out[i] = mat(rms(x[i], get("norm.weight")), embed, c.VocabSize)
	}
	return out
}

// relDiff is max|a-b| / max|b| over every row.
func relDiff(a []float32, b [][]float64) float64 {
	var num, den float64
	v := len(b[0])
	for i, row := range b {
		for j, x := range row {
			num = max(num, math.Abs(float64(a[i*v+j])-x))
			den = max(den, math.Abs(x))
		}
	}
	return num / den
}

// TestImageMask: every row's logits of a prompt with two images (each longer than the
// sliding window of 8) match the float64 reference with Gemma 3's image mask, and are far
// from the same reference without it (so dropping the mask fails this test); a prefill
// resumed inside an image (a prefix-cache hit ending there) gives the one pass's rows; a
// pass that would split an image is refused.
func TestImageMask(t *testing.T) {
	m := visionModel(t)
	ids, md := modeltest.TwoImagePrompt(t, m, testImage(40, 30, 1), testImage(30, 40, 2))
	caches, err := m.NewCaches(true)
	if err != nil {
		t.Fatal(err)
	}
	model.SetMedia(caches, md)
	got, err := m.Forward(context.Background(), ids, caches, true)
	if err != nil {
		t.Fatal(err)
	}
	want, causal := lmRef(t, m, ids, md, true), lmRef(t, m, ids, md, false)
	// float32 against float64 differs by some 3e-4 on text alone; the mask's effect is 0.1 to 1.
	if r := relDiff(got, want); r > 1e-3 {
		t.Errorf("logits differ from the reference with the image mask by %.3g", r)
	}
	if r := relDiff(got, causal); r < 0.1 {
		t.Errorf("logits are within %.3g of the reference without the image mask: the mask does nothing", r)
	}
	// Resume at row 12, inside the first image (rows 5 to 20): the caches keep rows 0..11.
	for _, c := range caches {
		if err := c.Truncate(12); err != nil {
			t.Fatal(err)
		}
	}
	rest, err := m.Forward(context.Background(), ids[12:], caches, true)
	if err != nil {
		t.Fatal(err)
	}
	if r := relDiff(rest, want[12:]); r > 1e-3 {
		t.Errorf("a prefill resumed inside an image differs from the reference by %.3g", r)
	}
	model.SetMedia(caches, nil)
	split, _ := m.NewCaches(true)
	model.SetMedia(split, md)
	defer model.SetMedia(split, nil)
	if _, err := m.Forward(context.Background(), ids[:12], split, true); err == nil || !strings.Contains(err.Error(), "split") {
		t.Errorf("a pass ending inside an image: %v, want an error about the split", err)
	}
}
