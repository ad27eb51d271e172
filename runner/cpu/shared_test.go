package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/internal/half"
	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
)

// storedAs is x (rows of dim values) as a cache of format f gives it back.
func storedAs(t *testing.T, x []float32, f kvstore.Format, dim int) []float32 {
	t.Helper()
	f16 := func(v []float32) []float32 {
		out := make([]float32, len(v))
		for i, a := range v {
			out[i] = half.F16ToF32(half.F32ToF16(a))
		}
		return out
	}
	if f.Rotated {
		// Stored as H·x and read back through H again (its own inverse).
		rot := slices.Clone(x)
		for i := 0; i < len(rot); i += dim {
			kvstore.Hadamard(rot[i : i+dim])
		}
		out := storedAs(t, rot, f.Rotate(false), dim)
		for i := 0; i < len(out); i += dim {
			kvstore.Hadamard(out[i : i+dim])
		}
		return out
	}
	switch f.Mode {
	case kvstore.F16:
		return f16(x)
	case kvstore.Affine:
		rows := len(x) / dim
		codes, scales, biases, err := quant.Quantize(x, rows, dim, f.Bits, f.Group)
		if err != nil {
			t.Fatal(err)
		}
		out, err := quant.Dequantize(codes, f16(scales), f16(biases), rows, dim, f.Bits, f.Group)
		if err != nil {
			t.Fatal(err)
		}
		return out
	case kvstore.Q4_0:
		// Blocks of 32: d = (the value of largest magnitude)/-8 in fp16, codes 0..15 of
		// x/d + 8, read back as d·(code-8).
		out := make([]float32, len(x))
		for b := 0; b < len(x); b += 32 {
			var m float32
			for _, v := range x[b : b+32] {
				if math.Abs(float64(v)) > math.Abs(float64(m)) {
					m = v
				}
			}
			d := half.F16ToF32(half.F32ToF16(m / -8))
			for i, v := range x[b : b+32] {
				if d != 0 {
					out[b+i] = float32(min(15, max(0, int(v/d+8.5)))-8) * d
				}
			}
		}
		return out
	}
	t.Fatalf("no rounding for %v", f)
	return nil
}

// refShared is grouped-query attention in float64 of the query rows at positions
// first..first+n-1 over keys and values at positions 0..len-1: a row sees its causal view
// (the last window positions up to its own when window > 0) and, inside a span, every
// position of that span.
func refShared(q, k, v []float32, first, n, heads, kvHeads, dim, window int, scale float64, spans []kvstore.Span) []float64 {
	out := make([]float64, n*heads*dim)
	for i := range n {
		p := first + i
		sees := func(j int) bool {
			if j <= p && (window == 0 || j > p-window) {
				return true
			}
			for _, s := range spans {
				if p >= s.Start && p < s.End && j >= s.Start && j < s.End {
					return true
				}
			}
			return false
		}
		for h := range heads {
			kh := h / (heads / kvHeads)
			var js []int
			var w []float64
			mx := math.Inf(-1)
			for j := 0; j < len(k)/(kvHeads*dim); j++ {
				if !sees(j) {
					continue
				}
				var s float64
				for d := range dim {
					s += float64(q[(i*heads+h)*dim+d]) * float64(k[(j*kvHeads+kh)*dim+d])
				}
				js, w = append(js, j), append(w, s*scale)
				mx = max(mx, s*scale)
			}
			var sum float64
			for x := range w {
				w[x] = math.Exp(w[x] - mx)
				sum += w[x]
			}
			for d := range dim {
				var o float64
				for x, j := range js {
					o += w[x] * float64(v[(j*kvHeads+kh)*dim+d])
				}
				out[(i*heads+h)*dim+d] = o / sum
			}
		}
	}
	return out
}

// TestAttentionSharedSpans: a KV-shared layer's attention (AttentionShared) with
// bidirectional spans, over a cache its source layer filled in the same pass
// (AttentionSpans with the same spans, other queries), computes the float64 reference
// over the keys and values as each cache kind stores them: float32 with every position,
// float32 over a sliding window, an fp16 ring, and the quantized layouts (fp16, affine,
// q4_0, rotated). The passes hold an image longer than the window, one that ends a pass,
// one begun in an earlier pass (a prefix hit inside an image) and a decode step; without
// the spans the result is far from the reference.
func TestAttentionSharedSpans(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 4))
	const heads, kvHeads, dim, window = 4, 2, 32, 8
	const scale = 0.2
	steps := []struct {
		n     int
		spans []kvstore.Span
	}{
		{12, nil},
		{20, []kvstore.Span{{Start: 14, End: 25}, {Start: 27, End: 32}}},
		{9, []kvstore.Span{{Start: 30, End: 38}}},
		{1, nil},
	}
	a := kvstore.AffineFormat
	for _, kc := range []struct {
		name   string
		spec   kvstore.Spec // as stored; the zero Spec for float32
		window int
		make   func() (kvstore.Layer, error)
	}{
		{"float32", kvstore.Spec{}, 0, func() (kvstore.Layer, error) { return kvstore.NewFull(kvHeads, dim, dim, true) }},
		{"float32 window", kvstore.Spec{}, window, func() (kvstore.Layer, error) { return kvstore.NewFullWindow(kvHeads, dim, dim, true, window) }},
		{"fp16 ring", kvstore.SpecF16, window, func() (kvstore.Layer, error) {
			return kvstore.NewRotating(kvHeads, dim, dim, window, kvstore.SpecF16, 0)
		}},
		{"fp16 blocks", kvstore.SpecF16, 0, nil},
		{"affine k8/v4", kvstore.Spec{K: a(8, 32), V: a(4, 32)}, 0, nil},
		{"q4_0", kvstore.Spec{K: kvstore.FormatQ4_0, V: kvstore.FormatQ4_0}, 0, nil},
		{"affine k6h/v6h", kvstore.Spec{K: a(6, 32).Rotate(true), V: a(6, 32).Rotate(true)}, 0, nil},
	} {
		t.Run(kc.name, func(t *testing.T) {
			var cache kvstore.Layer
			var err error
			if kc.make != nil {
				cache, err = kc.make()
			} else {
				cache, err = kvstore.NewQuantized(kvHeads, dim, dim, kc.spec, 0)
			}
			if err != nil {
				t.Fatal(err)
			}
			b := New(2)
			var allK, allV []float32
			var worst, causal float64
			for _, st := range steps {
				n := st.n
				q, q2 := randVec(r, n*heads*dim), randVec(r, n*heads*dim)
				k, v := randVec(r, n*kvHeads*dim), randVec(r, n*kvHeads*dim)
				first := cache.Len()
				got := run(t, b, func(c compute.Context) compute.Tensor {
					in := func(x []float32, w int) compute.Tensor { return c.(*context).Input(x, n, w) }
					sc, _ := compute.Ext[compute.SpanAttentionContext](c)
					sc.AttentionSpans(in(q, heads*dim), in(k, kvHeads*dim), in(v, kvHeads*dim), cache, heads, scale, st.spans)
					shc, _ := compute.Ext[compute.SharedKVContext](c)
					return shc.AttentionShared(in(q2, heads*dim), cache, heads, scale, st.spans)
				})
				if kc.spec != (kvstore.Spec{}) {
					k, v = storedAs(t, k, kc.spec.K, dim), storedAs(t, v, kc.spec.V, dim)
				}
				allK, allV = append(allK, k...), append(allV, v...)
				want := refShared(q2, allK, allV, first, n, heads, kvHeads, dim, kc.window, scale, st.spans)
				worst = max(worst, maxRel(got, want))
				if st.spans != nil {
					causal = max(causal, maxRel(got, refShared(q2, allK, allV, first, n, heads, kvHeads, dim, kc.window, scale, nil)))
				}
			}
			t.Logf("within %.2g of the reference, %.2g of it without the spans", worst, causal)
			if worst > 1e-5 {
				t.Errorf("AttentionShared with spans differs from the reference by %.3g", worst)
			}
			if causal < 1e-2 {
				t.Errorf("the spans change the result by only %.3g", causal)
			}
		})
	}
}

// maxRel is max|got-want| / max(1, max|want|).
func maxRel(got []float32, want []float64) float64 {
	var num, den float64 = 0, 1
	for i, w := range want {
		num = max(num, math.Abs(float64(got[i])-w))
		den = max(den, math.Abs(w))
	}
	return num / den
}
