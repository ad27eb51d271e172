package glm4moe_test

import (
	"math"
	"path/filepath"
	"sort"
	"testing"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// naive is a plain float64 forward pass of a GLM checkpoint in Hugging Face's layout
// (per-expert tensors, kv_b_proj whole), written from transformers' Glm4MoeForCausalLM and
// Glm4MoeLiteForCausalLM: attention over expanded per-head keys and values, no cache, the
// router as transformers writes it. It shares no code with the architecture, create's
// conversion or kvstore.
type naive struct {
	c randmodel.Config
	w map[string][]float64
}

func loadNaive(t *testing.T, dir string, c randmodel.Config) *naive {
	t.Helper()
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	n := &naive{c: c, w: map[string][]float64{}}
	for _, name := range ck.Names() {
		tn, _ := ck.Tensor(name)
		v, err := tn.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		f := make([]float64, len(v))
		for i, x := range v {
			f[i] = float64(x)
		}
		n.w[name] = f
	}
	return n
}

func (n *naive) linear(name string, x []float64, out int) []float64 {
	w := n.w[name+".weight"]
	in := len(x)
	y := make([]float64, out)
	for o := range y {
		var s float64
		for i, v := range x {
			s += w[o*in+i] * v
		}
		if b, ok := n.w[name+".bias"]; ok {
			s += b[o]
		}
		y[o] = s
	}
	return y
}

func (n *naive) rms(name string, x []float64) []float64 {
	w := n.w[name]
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+n.c.RMSNormEps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v * inv * w[i]
	}
	return y
}

// rope rotates x (one head's rotary part of dims values) at position p.
func (n *naive) rope(x []float64, p int, interleaved bool) {
	dims := len(x)
	for j := 0; j < dims/2; j++ {
		f := float64(float32(1 / math.Pow(n.c.RopeTheta, float64(2*j)/float64(dims))))
		cos, sin := math.Cos(float64(p)*f), math.Sin(float64(p)*f)
		a, b := j, j+dims/2
		if interleaved {
			a, b = 2*j, 2*j+1
		}
		x[a], x[b] = x[a]*cos-x[b]*sin, x[b]*cos+x[a]*sin
	}
}

func silu(x float64) float64 { return x / (1 + math.Exp(-x)) }

func (n *naive) mlp(p string, x []float64, inter int) []float64 {
	g, u := n.linear(p+"gate_proj", x, inter), n.linear(p+"up_proj", x, inter)
	for i := range g {
		g[i] = silu(g[i]) * u[i]
	}
	return n.linear(p+"down_proj", g, n.c.HiddenSize)
}

// moe is the expert block as transformers' router and experts compute it.
func (n *naive) moe(p string, x []float64) []float64 {
	c := n.c
	E := c.NumExperts
	logits := n.linear(p+"gate", x, E)
	bias := n.w[p+"gate.e_score_correction_bias"]
	score, choice := make([]float64, E), make([]float64, E)
	for e := range score {
		score[e] = 1 / (1 + math.Exp(-logits[e]))
		choice[e] = score[e] + bias[e]
	}
	groups, keep := max(c.NGroup, 1), max(c.TopKGroup, 1)
	size := E / groups
	gs := make([]float64, groups)
	for g := range gs {
		v := append([]float64(nil), choice[g*size:(g+1)*size]...)
		sort.Sort(sort.Reverse(sort.Float64Slice(v)))
		gs[g] = v[0] + v[1]
	}
	order := make([]int, groups)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return gs[order[a]] > gs[order[b]] })
	for _, g := range order[keep:] {
		for e := g * size; e < (g+1)*size; e++ {
			choice[e] = math.Inf(-1)
		}
	}
	idx := make([]int, E)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return choice[idx[a]] > choice[idx[b]] })
	idx = idx[:c.TopK]
	var sum float64
	for _, e := range idx {
		sum += score[e]
	}
	y := make([]float64, c.HiddenSize)
	for _, e := range idx {
		w := score[e]
		if c.NormTopK {
			w /= sum + 1e-20
		}
		w *= c.RoutedScaling
		for i, v := range n.mlp(p+"experts."+itoa(e)+".", x, c.MoEIntermediate) {
			y[i] += w * v
		}
	}
	if c.SharedExperts > 0 {
		for i, v := range n.mlp(p+"shared_experts.", x, c.SharedExperts*c.MoEIntermediate) {
			y[i] += v
		}
	}
	return y
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// attention is layer l's attention over xs (every position's normed input), causal.
func (n *naive) attention(p string, xs [][]float64) [][]float64 {
	c := n.c
	T, H := len(xs), c.NumHeads
	var qs, ks, vs [][][]float64 // [position][head][dim]
	var scale float64
	kvHeads := H
	if c.Arch == "glm4_moe_lite" {
		nope, rope, rank, vd := c.QKNopeHeadDim, c.QKRopeHeadDim, c.KVLoraRank, c.VHeadDim
		scale = 1 / math.Sqrt(float64(nope+rope))
		for t, x := range xs {
			q := n.linear(p+"q_b_proj", n.rms(p+"q_a_layernorm.weight", n.linear(p+"q_a_proj", x, c.QLoraRank)), H*(nope+rope))
			kv := n.linear(p+"kv_a_proj_with_mqa", x, rank+rope)
			latent := n.rms(p+"kv_a_layernorm.weight", kv[:rank])
			kr := append([]float64(nil), kv[rank:]...)
			n.rope(kr, t, c.RopeInterleave)
			up := n.linear(p+"kv_b_proj", latent, H*(nope+vd))
			var qh, kh, vh [][]float64
			for h := 0; h < H; h++ {
				qq := append([]float64(nil), q[h*(nope+rope):(h+1)*(nope+rope)]...)
				n.rope(qq[nope:], t, c.RopeInterleave)
				qh = append(qh, qq)
				kh = append(kh, append(append([]float64(nil), up[h*(nope+vd):h*(nope+vd)+nope]...), kr...))
				vh = append(vh, up[h*(nope+vd)+nope:(h+1)*(nope+vd)])
			}
			qs, ks, vs = append(qs, qh), append(ks, kh), append(vs, vh)
		}
	} else {
		hd := c.HeadDim
		kvHeads = c.NumKVHeads
		scale = 1 / math.Sqrt(float64(hd))
		dims := int(float64(hd) * c.PartialRotary)
		for t, x := range xs {
			q, k, v := n.linear(p+"q_proj", x, H*hd), n.linear(p+"k_proj", x, kvHeads*hd), n.linear(p+"v_proj", x, kvHeads*hd)
			head := func(all []float64, h int, norm string) []float64 {
				o := append([]float64(nil), all[h*hd:(h+1)*hd]...)
				if c.UseQKNorm {
					o = n.rms(p+norm, o)
				}
				n.rope(o[:dims], t, false)
				return o
			}
			var qh, kh, vh [][]float64
			for h := 0; h < H; h++ {
				qh = append(qh, head(q, h, "q_norm.weight"))
			}
			for h := 0; h < kvHeads; h++ {
				kh = append(kh, head(k, h, "k_norm.weight"))
				vh = append(vh, v[h*hd:(h+1)*hd])
			}
			qs, ks, vs = append(qs, qh), append(ks, kh), append(vs, vh)
		}
	}
	out := make([][]float64, T)
	for t := range out {
		var o []float64
		for h := 0; h < H; h++ {
			kh := h / (H / kvHeads)
			w := make([]float64, t+1)
			mx := math.Inf(-1)
			for j := 0; j <= t; j++ {
				for d, qv := range qs[t][h] {
					w[j] += qv * ks[j][kh][d]
				}
				w[j] *= scale
				mx = math.Max(mx, w[j])
			}
			var sum float64
			for j := range w {
				w[j] = math.Exp(w[j] - mx)
				sum += w[j]
			}
			acc := make([]float64, len(vs[0][kh]))
			for j := range w {
				for d, v := range vs[j][kh] {
					acc[d] += w[j] / sum * v
				}
			}
			o = append(o, acc...)
		}
		out[t] = n.linear(p+"o_proj", o, c.HiddenSize)
	}
	return out
}

// forward returns every position's logits.
func (n *naive) forward(tokens []int32) [][]float64 {
	c := n.c
	h := make([][]float64, len(tokens))
	emb := n.w["model.embed_tokens.weight"]
	for t, id := range tokens {
		h[t] = append([]float64(nil), emb[int(id)*c.HiddenSize:(int(id)+1)*c.HiddenSize]...)
	}
	for l := 0; l < c.NumLayers; l++ {
		p := "model.layers." + itoa(l) + "."
		xs := make([][]float64, len(h))
		for t := range h {
			xs[t] = n.rms(p+"input_layernorm.weight", h[t])
		}
		for t, a := range n.attention(p+"self_attn.", xs) {
			for i, v := range a {
				h[t][i] += v
			}
		}
		for t := range h {
			x := n.rms(p+"post_attention_layernorm.weight", h[t])
			var y []float64
			if l >= c.FirstDense {
				y = n.moe(p+"mlp.", x)
			} else {
				y = n.mlp(p+"mlp.", x, c.IntermediateSize)
			}
			for i, v := range y {
				h[t][i] += v
			}
		}
	}
	out := make([][]float64, len(h))
	for t := range h {
		out[t] = n.linear("lm_head", n.rms("model.norm.weight", h[t]), c.VocabSize)
	}
	return out
}

// TestAgainstPlainReference: the float32 model converted by `mlxg create` (experts
// stacked; for glm4_moe_lite kv_b_proj split and absorbed, the cache holding the latent)
// gives, at every position of a prompt, the logits of the plain float64 pass over the
// Hugging Face checkpoint within 1e-4 relative, for both architectures and for variants
// of their shapes (no grouping, every layer sparse, rotate-half RoPE, no renormalisation).
func TestAgainstPlainReference(t *testing.T) {
	lite2 := randmodel.TinyGlm4MoeLite(256)
	lite2.RopeInterleave, lite2.NGroup, lite2.TopKGroup, lite2.NormTopK, lite2.SharedExperts = false, 4, 2, false, 2
	moe2 := randmodel.TinyGlm4Moe(256)
	moe2.UseQKNorm, moe2.NGroup, moe2.TopKGroup, moe2.FirstDense, moe2.TopK = false, 1, 1, 0, 3
	for name, cfg := range map[string]randmodel.Config{
		"glm4_moe": randmodel.TinyGlm4Moe(256), "glm4_moe variant": moe2,
		"glm4_moe_lite": randmodel.TinyGlm4MoeLite(256), "glm4_moe_lite variant": lite2,
	} {
		t.Run(name, func(t *testing.T) {
			hf, mlx := filepath.Join(t.TempDir(), "hf"), filepath.Join(t.TempDir(), "mlx")
			if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 19}); err != nil {
				t.Fatal(err)
			}
			convertTo(t, hf, mlx, 0)
			m, err := model.Load(mlx, cpu.New(2))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			p := modeltest.Tokens(7, 24)
			caches, _ := m.NewCaches(true)
			got := modeltest.Forward(t, m, caches, p, 5)
			ref := loadNaive(t, hf, cfg).forward(p)
			want := make([]float32, 0, len(got))
			for _, row := range ref {
				for _, v := range row {
					want = append(want, float32(v))
				}
			}
			if r := modeltest.MaxRel(got, want); r > 1e-4 || math.IsNaN(r) {
				t.Fatalf("logits differ from the plain reference by %.3g relative", r)
			} else {
				t.Logf("within %.2g of the plain reference", r)
			}
		})
	}
}
