package kvstore

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// latentCase is one multi-head latent attention problem: per position a latent c (rank)
// and a rotary key kr (rope), per head the query's no-rope part qn (nope) and rotary part
// qr, and kv_b_proj's per-head halves wk (nope × rank) and wv (vdim × rank).
type latentCase struct {
	n, heads, nope, rope, rank, vdim int
	c, kr, qn, qr, wk, wv            []float32
}

func newLatentCase(r *rand.Rand, n, heads, nope, rope, rank, vdim int) latentCase {
	f := func(k int, s float64) []float32 {
		out := make([]float32, k)
		for i := range out {
			out[i] = float32(r.NormFloat64() * s)
		}
		return out
	}
	return latentCase{n: n, heads: heads, nope: nope, rope: rope, rank: rank, vdim: vdim,
		c: f(n*rank, 1), kr: f(n*rope, 1), qn: f(n*heads*nope, 0.3), qr: f(n*heads*rope, 0.3),
		wk: f(heads*nope*rank, 0.2), wv: f(heads*vdim*rank, 0.2)}
}

// expanded is the attention as transformers computes it, in float64: per head the keys
// [wk·c, kr] and values wv·c, causal over all n positions (the last rows of queries).
func (lc latentCase) expanded(scale float64) []float64 {
	out := make([]float64, lc.n*lc.heads*lc.vdim)
	for h := 0; h < lc.heads; h++ {
		k := make([][]float64, lc.n) // per position: nope then rope
		v := make([][]float64, lc.n)
		for j := 0; j < lc.n; j++ {
			k[j] = make([]float64, lc.nope+lc.rope)
			v[j] = make([]float64, lc.vdim)
			c := lc.c[j*lc.rank : (j+1)*lc.rank]
			for d := 0; d < lc.nope; d++ {
				for x, cv := range c {
					k[j][d] += float64(lc.wk[(h*lc.nope+d)*lc.rank+x]) * float64(cv)
				}
			}
			for d := 0; d < lc.rope; d++ {
				k[j][lc.nope+d] = float64(lc.kr[j*lc.rope+d])
			}
			for d := 0; d < lc.vdim; d++ {
				for x, cv := range c {
					v[j][d] += float64(lc.wv[(h*lc.vdim+d)*lc.rank+x]) * float64(cv)
				}
			}
		}
		for i := 0; i < lc.n; i++ {
			q := make([]float64, lc.nope+lc.rope)
			for d := 0; d < lc.nope; d++ {
				q[d] = float64(lc.qn[(i*lc.heads+h)*lc.nope+d])
			}
			for d := 0; d < lc.rope; d++ {
				q[lc.nope+d] = float64(lc.qr[(i*lc.heads+h)*lc.rope+d])
			}
			w := make([]float64, i+1)
			mx := math.Inf(-1)
			for j := 0; j <= i; j++ {
				for d := range q {
					w[j] += q[d] * k[j][d]
				}
				w[j] *= scale
				mx = math.Max(mx, w[j])
			}
			var sum float64
			for j := range w {
				w[j] = math.Exp(w[j] - mx)
				sum += w[j]
			}
			for d := 0; d < lc.vdim; d++ {
				var o float64
				for j := range w {
					o += w[j] * v[j][d]
				}
				out[(i*lc.heads+h)*lc.vdim+d] = o / sum
			}
		}
	}
	return out
}

// absorbed returns the latent queries q_c = wkᵀ·qn per row and head, and unembed maps
// latent outputs (rows × heads × rank) through wv to rows × heads × vdim.
func (lc latentCase) absorbed() []float32 {
	qc := make([]float32, lc.n*lc.heads*lc.rank)
	for i := 0; i < lc.n; i++ {
		for h := 0; h < lc.heads; h++ {
			for x := 0; x < lc.rank; x++ {
				var s float64
				for d := 0; d < lc.nope; d++ {
					s += float64(lc.wk[(h*lc.nope+d)*lc.rank+x]) * float64(lc.qn[(i*lc.heads+h)*lc.nope+d])
				}
				qc[(i*lc.heads+h)*lc.rank+x] = float32(s)
			}
		}
	}
	return qc
}

func (lc latentCase) unembed(o []float32, rows int) []float64 {
	out := make([]float64, rows*lc.heads*lc.vdim)
	for i := 0; i < rows; i++ {
		for h := 0; h < lc.heads; h++ {
			for d := 0; d < lc.vdim; d++ {
				var s float64
				for x := 0; x < lc.rank; x++ {
					s += float64(lc.wv[(h*lc.vdim+d)*lc.rank+x]) * float64(o[(i*lc.heads+h)*lc.rank+x])
				}
				out[(i*lc.heads+h)*lc.vdim+d] = s
			}
		}
	}
	return out
}

// run appends the positions to cache in steps and attends each step's rows, returning
// the latent outputs of every row.
func (lc latentCase) run(t *testing.T, cache Layer, steps []int, scale float32, threads int) []float32 {
	t.Helper()
	qc := lc.absorbed()
	var out []float32
	pos := 0
	for _, s := range steps {
		if err := cache.Append(lc.kr[pos*lc.rope:(pos+s)*lc.rope], lc.c[pos*lc.rank:(pos+s)*lc.rank], s); err != nil {
			t.Fatal(err)
		}
		o := make([]float32, s*lc.heads*lc.rank)
		err := cache.Attend(Attention{Q: lc.qr[pos*lc.heads*lc.rope : (pos+s)*lc.heads*lc.rope], QV: qc[pos*lc.heads*lc.rank : (pos+s)*lc.heads*lc.rank],
			Out: o, N: s, Heads: lc.heads, Scale: scale, Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o...)
		pos += s
	}
	return out
}

func maxRelErr(got, want []float64) float64 {
	var num, den float64
	for i := range got {
		num = math.Max(num, math.Abs(got[i]-want[i]))
		den = math.Max(den, math.Abs(want[i]))
	}
	return num / den
}

// TestLatentAttentionEqualsExpanded: attention over the cached latent, with kv_b_proj
// absorbed into the query and applied to the output, is the attention over expanded
// per-head keys and values, for a float32 cache (to float rounding), fp16 and 8-bit
// quantized layouts with and without Hadamard rotation (to their rounding), over more
// than one block, in a prefill, chunks and decode steps.
func TestLatentAttentionEqualsExpanded(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 3))
	const heads, nope, rope, rank, vdim = 4, 24, 32, 64, 32
	n := BlockTokens + 40
	lc := newLatentCase(r, n, heads, nope, rope, rank, vdim)
	scale := 1 / math.Sqrt(float64(nope+rope))
	want := lc.expanded(scale)
	a8 := AffineFormat(8, 32)
	for _, tc := range []struct {
		name string
		make func() (Layer, error)
		tol  float64
	}{
		{"fp32", func() (Layer, error) { return NewFull(1, rope, rank, true) }, 1e-5},
		{"fp16", func() (Layer, error) { return NewFull(1, rope, rank, false) }, 3e-3},
		{"k8/v8", func() (Layer, error) { return NewQuantized(1, rope, rank, Spec{K: a8, V: a8}, 0) }, 2e-2},
		{"k8/v8 rotated", func() (Layer, error) {
			return NewQuantized(1, rope, rank, Spec{K: a8.Rotate(true), V: a8.Rotate(true)}, 0)
		}, 2e-2},
		{"k8/v8 from 100", func() (Layer, error) { return NewQuantized(1, rope, rank, Spec{K: a8, V: a8}, 100) }, 2e-2},
	} {
		for _, steps := range [][]int{{n}, {100, 150, n - 250}, append([]int{n - 3}, 1, 1, 1)} {
			cache, err := tc.make()
			if err != nil {
				t.Fatal(err)
			}
			got := lc.unembed(lc.run(t, cache, steps, float32(scale), 4), n)
			if e := maxRelErr(got, want); e > tc.tol {
				t.Errorf("%s, steps %v: relative error %.3g > %.3g", tc.name, steps, e, tc.tol)
			}
		}
	}
}

// TestLatentAttentionRowsIndependent: a row's latent output is bit-identical whether it
// is attended in a prefill, in a chunk, alone, on one thread or on many.
func TestLatentAttentionRowsIndependent(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 9))
	const heads, nope, rope, rank, vdim = 6, 8, 64, 64, 16
	n := BlockTokens + 21
	lc := newLatentCase(r, n, heads, nope, rope, rank, vdim)
	ref := func(steps []int, threads int, quantized bool) []float32 {
		var cache Layer
		var err error
		if quantized {
			cache, err = NewQuantized(1, rope, rank, Spec{K: AffineFormat(8, 64), V: AffineFormat(4, 32)}, 0)
		} else {
			cache, err = NewFull(1, rope, rank, false)
		}
		if err != nil {
			t.Fatal(err)
		}
		return lc.run(t, cache, steps, 0.1, threads)
	}
	ones := make([]int, n)
	for i := range ones {
		ones[i] = 1
	}
	for _, q := range []bool{false, true} {
		base := ref(ones, 1, q)
		for _, v := range []struct {
			steps   []int
			threads int
		}{{[]int{n}, 1}, {[]int{n}, 7}, {[]int{17, n - 17}, 3}, {ones, 5}} {
			if got := ref(v.steps, v.threads, q); !slices.Equal(got, base) {
				t.Errorf("quantized %v, steps %d.., threads %d: rows differ from one at a time", q, v.steps[0], v.threads)
			}
		}
	}
}

// TestLatentLayerShape: a config with kv_lora_rank gives latent layers of one KV head,
// the rotary key as K and the latent as V, whose bytes per token the layout counts.
func TestLatentLayerShape(t *testing.T) {
	cfg := `{"model_type":"glm4_moe_lite","num_hidden_layers":3,"num_attention_heads":20,"num_key_value_heads":20,
		"hidden_size":2048,"kv_lora_rank":512,"qk_rope_head_dim":64,"qk_nope_head_dim":192,"v_head_dim":256,"max_position_embeddings":1000}`
	m, err := ShapeFromConfig([]byte(cfg), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i, ls := range m.Layers {
		if ls.Kind != LayerLatent || ls.KVHeads != 1 || ls.KHeadDim != 64 || ls.VHeadDim != 512 {
			t.Fatalf("layer %d: %+v", i, ls)
		}
	}
	l, err := NewLayout(m, SpecF16, 0, SpecF16)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.TokenBytes(m), int64(3*(64+512)*2); got != want {
		t.Errorf("TokenBytes %d, want %d (the latent and rotary key, fp16)", got, want)
	}
	l.MaxKVSize = 10
	if got, want := l.Bytes(m, 100), int64(100*3*(64+512)*2); got != want {
		t.Errorf("Bytes(100) with max-kv-size 10: %d, want %d (latent layers keep every position)", got, want)
	}
	caches, err := NewCaches(m, l)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range caches {
		if _, ok := c.(*Full); !ok {
			t.Errorf("layer %d: %T, want *Full", i, c)
		}
	}
}
