package kvstore

import (
	"math"
	"math/rand/v2"
	"testing"
)

// refSinkAttention is refAttention with one sink logit per query head joining each
// softmax's denominator (gpt-oss), in float64; window > 0 limits row i to the last
// window positions up to its own.
func refSinkAttention(q, k, v, sinks []float32, n, length, heads, kvHeads, kDim, vDim, window int, scale float64) []float32 {
	out := make([]float32, n*heads*vDim)
	group := heads / kvHeads
	for i := 0; i < n; i++ {
		pos := length - n + i
		lo := 0
		if window > 0 {
			lo = max(0, pos-window+1)
		}
		for h := 0; h < heads; h++ {
			kh := h / group
			qv := q[(i*heads+h)*kDim:][:kDim]
			w := make([]float64, pos+1-lo)
			mx := float64(sinks[h])
			for j := lo; j <= pos; j++ {
				var s float64
				for d := 0; d < kDim; d++ {
					s += float64(qv[d]) * float64(k[(j*kvHeads+kh)*kDim+d])
				}
				w[j-lo] = s * scale
				mx = math.Max(mx, w[j-lo])
			}
			sum := math.Exp(float64(sinks[h]) - mx)
			for j := range w {
				w[j] = math.Exp(w[j] - mx)
				sum += w[j]
			}
			for d := 0; d < vDim; d++ {
				var o float64
				for j := range w {
					o += w[j] * float64(v[((lo+j)*kvHeads+kh)*vDim+d])
				}
				out[(i*heads+h)*vDim+d] = float32(o / sum)
			}
		}
	}
	return out
}

// TestSinksExact: a float32 cache (full, and a sliding window) attends with sinks as the
// float64 reference does, for prefill chunks and decode steps, on one thread and split
// over several (the partial states merged before the sink joins), with sinks both below
// and far above every score (where the sink's e^(sink-max) must not overflow).
func TestSinksExact(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 1))
	const kvHeads, heads, kDim, vDim = 2, 6, 32, 16
	for _, sinkScale := range []float32{1, 60} {
		for _, kind := range []string{"full", "ring", "full window"} {
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
				sinks := randVec(r, heads)
				for i := range sinks {
					sinks[i] *= sinkScale
				}
				var allK, allV []float32
				for _, n := range []int{30, 1, 270, 1, 1} {
					k, v := randVec(r, n*kvHeads*kDim), randVec(r, n*kvHeads*vDim)
					if kind == "ring" { // the ring stores fp16
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
					if err := c.Attend(Attention{Q: q, Out: got, N: n, Heads: heads, Scale: 0.2, Threads: threads, Sinks: sinks}); err != nil {
						t.Fatal(err)
					}
					want := refSinkAttention(q, allK, allV, sinks, n, c.Len(), heads, kvHeads, kDim, vDim, window, 0.2)
					for i := range want {
						if d := math.Abs(float64(got[i] - want[i])); d > 2e-5*max(1, math.Abs(float64(want[i]))) || math.IsNaN(float64(got[i])) {
							t.Fatalf("sinks ×%v, %s %d, threads %d, len %d: element %d = %v, want %v", sinkScale, kind, window, threads, c.Len(), i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestSinksEveryLayout: on every cache layout (fp16, quantized, rotated, sliding), a
// head's output with a sink is its output without one times Σe^s / (Σe^s + e^sink): with
// two sinks s1 and s2 the ratios r1 and r2 to the plain output must give the same
// log-sum-exp L = s + log(r/(1-r)), whatever the cache stores.
func TestSinksEveryLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 2))
	const kvHeads, heads, dim = 2, 4, 64
	a := AffineFormat
	specs := []Spec{SpecF16, {K: a(8, 64), V: a(8, 64)}, {K: a(4, 64), V: a(4, 32)}, {K: a(8, 64).Rotate(true), V: a(4, 32).Rotate(true)}}
	for _, spec := range specs {
		for _, window := range []int{0, 50} {
			var c Layer
			var err error
			if window > 0 {
				c, err = NewRotating(kvHeads, dim, dim, window, spec, 0)
			} else {
				c, err = NewQuantized(kvHeads, dim, dim, spec, 0)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{70, 1, 200, 1} {
				if err := c.Append(randVec(r, n*kvHeads*dim), randVec(r, n*kvHeads*dim), n); err != nil {
					t.Fatal(err)
				}
				q := randVec(r, n*heads*dim)
				s1, s2 := randVec(r, heads), randVec(r, heads)
				var outs [3][]float32
				for i, sinks := range [][]float32{nil, s1, s2} {
					outs[i] = make([]float32, n*heads*dim)
					if err := c.Attend(Attention{Q: q, Out: outs[i], N: n, Heads: heads, Scale: 0.125, Threads: 3, Sinks: sinks}); err != nil {
						t.Fatal(err)
					}
				}
				for row := 0; row < n; row++ {
					for h := 0; h < heads; h++ {
						at := (row*heads + h) * dim
						ratio := func(o []float32) float64 {
							var num, den float64
							for d := 0; d < dim; d++ {
								num += float64(o[at+d]) * float64(outs[0][at+d])
								den += float64(outs[0][at+d]) * float64(outs[0][at+d])
							}
							return num / den
						}
						r1, r2 := ratio(outs[1]), ratio(outs[2])
						l1 := float64(s1[h]) + math.Log(r1/(1-r1))
						l2 := float64(s2[h]) + math.Log(r2/(1-r2))
						if math.Abs(l1-l2) > 1e-3 || !(r1 > 0 && r1 < 1) {
							t.Fatalf("spec %v, window %d, len %d, row %d head %d: ratios %v and %v give log-sum-exps %v and %v", spec, window, c.Len(), row, h, r1, r2, l1, l2)
						}
					}
				}
			}
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
