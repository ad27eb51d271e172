package kvstore

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// refSpanAttention is grouped-query attention in float64 under Gemma 3's mask: row i
// (position length-n+i) sees the positions of its causal view (the last window up to its
// own when window > 0) and, inside a span, every position of that span.
func refSpanAttention(q, k, v []float32, n, length, heads, kvHeads, kDim, vDim, window int, scale float64, spans []Span) []float32 {
	out := make([]float32, n*heads*vDim)
	group := heads / kvHeads
	for i := 0; i < n; i++ {
		pos := length - n + i
		sees := func(j int) bool {
			if j <= pos && (window == 0 || j > pos-window) {
				return true
			}
			for _, s := range spans {
				if pos >= s.Start && pos < s.End && j >= s.Start && j < s.End {
					return true
				}
			}
			return false
		}
		for h := 0; h < heads; h++ {
			kh := h / group
			qv := q[(i*heads+h)*kDim:][:kDim]
			var js []int
			var w []float64
			mx := math.Inf(-1)
			for j := 0; j < length; j++ {
				if !sees(j) {
					continue
				}
				var s float64
				for d := 0; d < kDim; d++ {
					s += float64(qv[d]) * float64(k[(j*kvHeads+kh)*kDim+d])
				}
				js, w = append(js, j), append(w, s*scale)
				mx = math.Max(mx, s*scale)
			}
			var sum float64
			for x := range w {
				w[x] = math.Exp(w[x] - mx)
				sum += w[x]
			}
			for d := 0; d < vDim; d++ {
				var o float64
				for x, j := range js {
					o += w[x] * float64(v[(j*kvHeads+kh)*vDim+d])
				}
				out[(i*heads+h)*vDim+d] = float32(o / sum)
			}
		}
	}
	return out
}

// spanSteps are appends and the spans each call attends with: an image inside a prefill
// chunk, one that fills a chunk's end, one begun before its chunk (a prefix-cache hit
// that ends inside an image), one longer than the window of 40, and decode steps after.
var spanSteps = []struct {
	n     int
	spans []Span
}{
	{30, nil},
	{1, nil},
	{100, []Span{{40, 70}, {90, 131}}},
	{60, []Span{{125, 150}, {160, 191}}},
	{1, []Span{{160, 191}}},
	{70, []Span{{195, 250}}},
	{1, nil},
}

// TestBidirectionalSpans: float32 caches (all positions, and a sliding window) and an fp16
// ring attend with bidirectional spans as the float64 reference does, on one thread and on
// four; without the spans the widened rows differ (the test can fail).
func TestBidirectionalSpans(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 1))
	const kvHeads, heads, kDim, vDim = 2, 4, 32, 16
	for _, kind := range []string{"full", "full window", "ring"} {
		for _, threads := range []int{1, 4} {
			var c Layer
			window := 40
			switch kind {
			case "ring":
				c, _ = NewRotating(kvHeads, kDim, vDim, window, SpecF16, 1<<30)
			case "full window":
				c, _ = NewFullWindow(kvHeads, kDim, vDim, true, window)
			default:
				c, window = must(NewFull(kvHeads, kDim, vDim, true)), 0
			}
			var allK, allV []float32
			for _, st := range spanSteps {
				n := st.n
				k, v := randVec(r, n*kvHeads*kDim), randVec(r, n*kvHeads*vDim)
				if kind == "ring" {
					for i := range k {
						k[i] = f16round(k[i])
					}
					for i := range v {
						v[i] = f16round(v[i])
					}
				}
				if err := c.Append(k, v, n); err != nil {
					t.Fatal(err)
				}
				allK, allV = append(allK, k...), append(allV, v...)
				q := randVec(r, n*heads*kDim)
				got := make([]float32, n*heads*vDim)
				if err := c.Attend(Attention{Q: q, Out: got, N: n, Heads: heads, Scale: 0.2, Threads: threads, Bidirectional: st.spans}); err != nil {
					t.Fatalf("%s: %v", kind, err)
				}
				want := refSpanAttention(q, allK, allV, n, c.Len(), heads, kvHeads, kDim, vDim, window, 0.2, st.spans)
				for i := range want {
					if d := math.Abs(float64(got[i] - want[i])); d > 2e-5*max(1, math.Abs(float64(want[i]))) || math.IsNaN(float64(got[i])) {
						t.Fatalf("%s, threads %d, len %d, spans %v: element %d (row %d) = %v, want %v", kind, threads, c.Len(), st.spans, i, i/(heads*vDim), got[i], want[i])
					}
				}
				if st.spans == nil || n == 1 { // a step after its spans: nothing to widen
					continue
				}
				causal := refSpanAttention(q, allK, allV, n, c.Len(), heads, kvHeads, kDim, vDim, window, 0.2, nil)
				if slices.Equal(causal, want) {
					t.Fatalf("%s: spans %v change nothing in the reference", kind, st.spans)
				}
			}
		}
	}
}

// TestBidirectionalEveryLayout: on quantized and rotated layouts a widened row computes what
// a decode step at its span's last position computes over a cache of the same appends (the
// kinds' own kernels), and the other rows what the call without spans gives them.
func TestBidirectionalEveryLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 2))
	const kvHeads, heads, dim = 2, 4, 64
	a := AffineFormat
	for _, spec := range []Spec{SpecF16, {K: a(8, 64), V: a(8, 64)}, {K: a(8, 64).Rotate(true), V: a(4, 32).Rotate(true)}} {
		c := must(NewQuantized(kvHeads, dim, dim, spec, 0))
		var allK, allV []float32
		for _, st := range spanSteps[:4] {
			n := st.n
			k, v := randVec(r, n*kvHeads*dim), randVec(r, n*kvHeads*dim)
			if err := c.Append(k, v, n); err != nil {
				t.Fatal(err)
			}
			allK, allV = append(allK, k...), append(allV, v...)
			q := randVec(r, n*heads*dim)
			got, plain := make([]float32, n*heads*dim), make([]float32, n*heads*dim)
			if err := c.Attend(Attention{Q: q, Out: got, N: n, Heads: heads, Scale: 0.125, Threads: 3, Bidirectional: st.spans}); err != nil {
				t.Fatal(err)
			}
			if err := c.Attend(Attention{Q: q, Out: plain, N: n, Heads: heads, Scale: 0.125, Threads: 3}); err != nil {
				t.Fatal(err)
			}
			first := c.Len() - n
			w := heads * dim
			for i := 0; i < n; i++ {
				p := first + i
				end := p + 1
				for _, s := range st.spans {
					if p >= s.Start && p < s.End {
						end = s.End
					}
				}
				row := got[i*w : (i+1)*w]
				if end == p+1 {
					for j := range row {
						if d := math.Abs(float64(row[j] - plain[i*w+j])); d > 1e-5*max(1, math.Abs(float64(plain[i*w+j]))) {
							t.Fatalf("spec %v, row %d outside the spans: %v, without spans %v", spec, p, row[j], plain[i*w+j])
						}
					}
					continue
				}
				dec := must(NewQuantized(kvHeads, dim, dim, spec, 0))
				if err := dec.Append(allK[:end*kvHeads*dim], allV[:end*kvHeads*dim], end); err != nil {
					t.Fatal(err)
				}
				one := make([]float32, w)
				if err := dec.Attend(Attention{Q: q[i*w : (i+1)*w], Out: one, N: 1, Heads: heads, Scale: 0.125, Threads: 3}); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(row, one) {
					t.Fatalf("spec %v, row %d in a span ending at %d: differs from a step at %d (max %.3g)", spec, p, end, end-1, maxDiff(row, one))
				}
				if slices.Equal(row, plain[i*w:(i+1)*w]) && end > p+1 {
					t.Fatalf("spec %v, row %d: the span changed nothing", spec, p)
				}
			}
		}
	}
}

// TestBidirectionalErrors: spans out of order, past the cache or with latent queries are
// refused.
func TestBidirectionalErrors(t *testing.T) {
	c := must(NewFull(1, 8, 8, true))
	if err := c.Append(make([]float32, 80), make([]float32, 80), 10); err != nil {
		t.Fatal(err)
	}
	q, out := make([]float32, 40), make([]float32, 40)
	for _, spans := range [][]Span{{{6, 12}}, {{4, 8}, {2, 5}}, {{5, 5}}} {
		if err := c.Attend(Attention{Q: q, Out: out, N: 5, Heads: 1, Scale: 1, Bidirectional: spans}); err == nil {
			t.Errorf("spans %v were accepted", spans)
		}
	}
	if err := c.Attend(Attention{Q: q, Out: out, N: 5, Heads: 1, Scale: 1, Bidirectional: []Span{{6, 9}}, QV: q}); err == nil {
		t.Error("latent attention with spans was accepted")
	}
}

func maxDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}
