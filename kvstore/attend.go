package kvstore

import (
	"fmt"
	"math"
	"sync"

	"github.com/mlxg/mlxg/internal/quant"
)

// tiler is what a cache kind gives the shared attention loop: the keys and values of
// one KV head at positions [from, to) of one block (to-from <= BlockTokens), widened
// into float32 rows of kHeadDim and vHeadDim. A quantized kind dequantizes here, one
// tile at a time, so no full-size float copy of the cache ever exists.
type tiler interface {
	Dims() (kvHeads, kHeadDim, vHeadDim int)
	tile(k, v []float32, head, from, to int)
}

// attendTiles runs causal grouped-query attention over the first length positions of
// t, with a flash-attention style online softmax: for each KV head it walks the cache
// block by block, loads each tile once, and updates every query row and every query
// head of the group that may see it. Work is split over KV heads and chunks of rows.
func attendTiles(t tiler, length int, a Attention) error {
	kvHeads, kDim, vDim := t.Dims()
	switch {
	case a.N <= 0 || a.N > length:
		return fmt.Errorf("kvstore: Attend for %d query rows over a cache of %d positions", a.N, length)
	case a.Heads <= 0 || a.Heads%kvHeads != 0:
		return fmt.Errorf("kvstore: %d query heads is not a multiple of the cache's %d KV heads", a.Heads, kvHeads)
	case len(a.Q) != a.N*a.Heads*kDim || len(a.Out) != a.N*a.Heads*vDim:
		return fmt.Errorf("kvstore: Attend needs %d query and %d output floats for %d rows of %d heads, got %d and %d",
			a.N*a.Heads*kDim, a.N*a.Heads*vDim, a.N, a.Heads, len(a.Q), len(a.Out))
	}
	threads := max(a.Threads, 1)
	chunks := min(a.N, max(1, (2*threads+kvHeads-1)/kvHeads))
	rowsPer := (a.N + chunks - 1) / chunks
	chunks = (a.N + rowsPer - 1) / rowsPer
	group := a.Heads / kvHeads
	first := length - a.N // absolute position of query row 0

	parallel(threads, kvHeads*chunks, func(item int) {
		h, r0 := item/chunks, item%chunks*rowsPer
		r1 := min(r0+rowsPer, a.N)
		rows := r1 - r0
		s := scratchPool.Get().(*scratch)
		defer scratchPool.Put(s)
		kt, vt := s.grow(&s.k, BlockTokens*kDim), s.grow(&s.v, BlockTokens*vDim)
		scores := s.grow(&s.scores, BlockTokens)
		m, l := s.grow(&s.m, rows*group), s.grow(&s.l, rows*group)
		acc := s.grow(&s.acc, rows*group*vDim)
		for i := range m {
			m[i], l[i] = float32(math.Inf(-1)), 0
		}
		clear(acc)
		last := first + r1 - 1 // the last position any row of this chunk sees
		for from := 0; from <= last; from += BlockTokens {
			to := min(from+BlockTokens, last+1)
			t.tile(kt, vt, h, from, to)
			for i := r0; i < r1; i++ {
				end := min(to, first+i+1)
				if end <= from {
					continue
				}
				for g := 0; g < group; g++ {
					hq := h*group + g
					q := a.Q[(i*a.Heads+hq)*kDim:][:kDim]
					st := (i-r0)*group + g
					mx := m[st]
					sc := scores[:end-from]
					j := 0
					var s4 [4]float32
					for ; j+4 <= len(sc); j += 4 { // four keys per pass over q
						quant.DotRows4(&s4, q, kt[j*kDim:], kDim)
						sc[j], sc[j+1], sc[j+2], sc[j+3] = a.Scale*s4[0], a.Scale*s4[1], a.Scale*s4[2], a.Scale*s4[3]
					}
					for ; j < len(sc); j++ {
						sc[j] = a.Scale * dot(q, kt[j*kDim:(j+1)*kDim])
					}
					for _, x := range sc {
						mx = max(mx, x)
					}
					o := acc[st*vDim : (st+1)*vDim]
					if mx > m[st] {
						corr := expNeg(m[st] - mx)
						l[st] *= corr
						for d := range o {
							o[d] *= corr
						}
						m[st] = mx
					}
					for j := range sc {
						sc[j] = expNeg(sc[j] - mx)
						l[st] += sc[j]
					}
					j = 0
					for ; j+4 <= len(sc); j += 4 { // four values per pass over o
						quant.AxpyRows4(o, vt[j*vDim:], vDim, (*[4]float32)(sc[j:j+4]))
					}
					for ; j < len(sc); j++ {
						axpy(o, vt[j*vDim:(j+1)*vDim], sc[j])
					}
				}
			}
		}
		for i := r0; i < r1; i++ {
			for g := 0; g < group; g++ {
				hq := h*group + g
				st := (i-r0)*group + g
				out := a.Out[(i*a.Heads+hq)*vDim:][:vDim]
				inv := 1 / l[st]
				for d, x := range acc[st*vDim : (st+1)*vDim] {
					out[d] = x * inv
				}
			}
		}
	})
	return nil
}

type scratch struct{ k, v, scores, m, l, acc []float32 }

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func (s *scratch) grow(buf *[]float32, n int) []float32 {
	if cap(*buf) < n {
		*buf = make([]float32, n)
	}
	return (*buf)[:n]
}

// parallel runs fn(0..items-1) on up to threads goroutines.
func parallel(threads, items int, fn func(int)) {
	threads = min(threads, items)
	if threads <= 1 {
		for i := 0; i < items; i++ {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	for w := 0; w < threads; w++ {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= items {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}

func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy: y += a*x.
func axpy(y, x []float32, a float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// expNeg is e^x for x <= 0 (softmax exponents after subtracting the max), to about
// 2 ulp: x = k·ln2 + r with |r| <= ln2/2, e^r by its degree-7 Taylor polynomial.
func expNeg(x float32) float32 {
	if x < -87 {
		return 0 // also -Inf
	}
	const ln2Hi, ln2Lo = 0.693145751953125, 1.428606765330187e-06
	k := int32(x*1.442695041 - 0.5)
	kf := float32(k)
	r := (x - kf*ln2Hi) - kf*ln2Lo
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040)))))))
	return p * math.Float32frombits(uint32(k+127)<<23)
}
