package kvstore

import (
	"fmt"
	"math"
	"sync"

	"github.com/mlxg/mlxg/internal/crew"
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
// head of the group that may see it. Work is split over KV heads and chunks of rows;
// when that leaves threads idle (a decode step over few KV heads), the blocks are
// split too and the partial softmax states merged at the end.
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
	case a.Sinks != nil && len(a.Sinks) != a.Heads:
		return fmt.Errorf("kvstore: Attend with %d sink logits for %d query heads", len(a.Sinks), a.Heads)
	}
	threads := max(a.Threads, 1)
	chunks := min(a.N, max(1, (2*threads+kvHeads-1)/kvHeads))
	if a.N >= 2*prefillChunkRows {
		// A prefill: about 4 items per thread, so that a thread that loses its core to
		// another process, or drew the short rows of a causal triangle, holds up one small
		// item; rows are computed alone, so the split does not change the result.
		chunks = min(a.N/prefillChunkRows, max(chunks, (4*threads+kvHeads-1)/kvHeads))
	}
	rowsPer := (a.N + chunks - 1) / chunks
	chunks = (a.N + rowsPer - 1) / rowsPer
	blocks := (length + BlockTokens - 1) / BlockTokens
	splits := 1
	if kvHeads*chunks < threads {
		splits = min(blocks, (threads+kvHeads*chunks-1)/(kvHeads*chunks))
	}
	group := a.Heads / kvHeads
	var parts []state // per item when split: partial states to merge
	if splits > 1 {
		parts = make([]state, kvHeads*chunks*splits)
	}

	items := kvHeads * chunks * splits
	crew.Run(items, items, min(threads, items)-1, func(lo, hi int) { // parallel's, without its wrapper closure
		for item := lo; item < hi; item++ {
			attendItem(t, a, parts, item, chunks, splits, rowsPer, group, vDim, length, blocks)
		}
	})
	if splits > 1 {
		parallel(threads, kvHeads*chunks, func(item int) {
			h, c := item/chunks, item%chunks
			r0 := c * rowsPer
			r1 := min(r0+rowsPer, a.N)
			merged := parts[item*splits]
			for _, p := range parts[item*splits+1 : (item+1)*splits] {
				merged.merge(p, vDim)
			}
			merged.write(a, h, group, r0, r1, vDim)
		})
	}
	return nil
}

// attendItem is one item of attendTiles: KV head h's query rows of chunk c over split sp of
// the blocks.
func attendItem(t tiler, a Attention, parts []state, item, chunks, splits, rowsPer, group, vDim, length, blocks int) {
	h, c, sp := item/(chunks*splits), item/splits%chunks, item%splits
	r0 := c * rowsPer
	r1 := min(r0+rowsPer, a.N)
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	var st state
	if splits > 1 {
		st = newState((r1-r0)*group, vDim)
	} else {
		st = state{m: s.grow(&s.m, (r1-r0)*group), l: s.grow(&s.l, (r1-r0)*group), acc: s.grow(&s.acc, (r1-r0)*group*vDim)}
		st.reset()
	}
	attendPart(t, s, a, &st, length, h, r0, r1, sp*blocks/splits, (sp+1)*blocks/splits)
	if splits > 1 {
		parts[item] = st
		return
	}
	st.write(a, h, group, r0, r1, vDim)
}

// prefillChunkRows is the fewest query rows of a prefill's chunk (each chunk dequantizes
// the tiles it reads once for its rows).
const prefillChunkRows = 32

// state is the online softmax of a set of (query row, head) pairs: running max m,
// sum of exponentials l, and the weighted sum of values acc (vDim each).
type state struct{ m, l, acc []float32 }

func newState(n, vDim int) state {
	st := state{m: make([]float32, n), l: make([]float32, n), acc: make([]float32, n*vDim)}
	st.reset()
	return st
}

func (st *state) reset() {
	for i := range st.m {
		st.m[i], st.l[i] = float32(math.Inf(-1)), 0
	}
	clear(st.acc)
}

// raise moves pair k's running max up to mx when mx is larger, rescaling its sum and
// values by e^(old max - mx).
func (st *state) raise(k int, mx float32, vDim int) {
	if !(mx > st.m[k]) { // NaN included, as before
		return
	}
	corr := expNeg(st.m[k] - mx)
	st.l[k] *= corr
	o := st.acc[k*vDim : (k+1)*vDim]
	for d := range o {
		o[d] *= corr
	}
	st.m[k] = mx
}

// merge folds another partial state over different positions of the same pairs in.
func (st *state) merge(o state, vDim int) {
	for i := range st.m {
		mx := max(st.m[i], o.m[i])
		if math.IsInf(float64(mx), -1) {
			continue // neither saw a position yet
		}
		a, b := expNeg(st.m[i]-mx), expNeg(o.m[i]-mx)
		st.l[i] = st.l[i]*a + o.l[i]*b
		x, y := st.acc[i*vDim:(i+1)*vDim], o.acc[i*vDim:(i+1)*vDim]
		for d := range x {
			x[d] = x[d]*a + y[d]*b
		}
		st.m[i] = mx
	}
}

// write normalises the state of rows r0..r1-1 of KV head h into a.Out. A head's sink
// logit (a.Sinks) joins the denominator only: e^(sink-m) next to the running sum l of
// e^(s-m), with the max taken over the sink too, so that neither side overflows.
func (st *state) write(a Attention, h, group, r0, r1, vDim int) {
	for i := r0; i < r1; i++ {
		for g := 0; g < group; g++ {
			k := (i-r0)*group + g
			out := a.Out[(i*a.Heads+h*group+g)*vDim:][:vDim]
			inv := 1 / st.l[k]
			if a.Sinks != nil {
				sink, m := a.Sinks[h*group+g], st.m[k]
				if mx := max(m, sink); mx > m {
					c := expNeg(m - mx) // rescale the sum and the values to the sink's max
					inv = c / (st.l[k]*c + 1)
				} else {
					inv = 1 / (st.l[k] + expNeg(sink-m))
				}
			}
			for d, x := range st.acc[k*vDim : (k+1)*vDim] {
				out[d] = x * inv
			}
		}
	}
}

// attendPart updates st for query rows r0..r1-1 of KV head h's group with the
// positions of blocks b0..b1-1 that each row may see.
func attendPart(t tiler, s *scratch, a Attention, st *state, length, h, r0, r1, b0, b1 int) {
	if attendFused(t, s, a, st, length, h, r0, r1, b0, b1) {
		return
	}
	kvHeads, kDim, vDim := t.Dims()
	if useBlocked(r0, r1, vDim) {
		attendBlocked(t, s, a, st, length, h, r0, r1, b0, b1)
		return
	}
	group := a.Heads / kvHeads
	first := length - a.N // absolute position of query row 0
	kt, vt := s.grow(&s.k, BlockTokens*kDim), s.grow(&s.v, BlockTokens*vDim)
	scores := s.grow(&s.scores, BlockTokens)
	last := first + r1 - 1 // the last position any row of this chunk sees
	for from := b0 * BlockTokens; from < b1*BlockTokens && from <= last; from += BlockTokens {
		to := min(from+BlockTokens, last+1)
		t.tile(kt, vt, h, from, to)
		for i := r0; i < r1; i++ {
			end := min(to, first+i+1)
			if end <= from {
				continue
			}
			for g := 0; g < group; g++ {
				q := a.Q[(i*a.Heads+h*group+g)*kDim:][:kDim]
				k := (i-r0)*group + g
				sc := scores[:end-from]
				j := 0
				var s4 [4]float32
				for ; j+4 <= len(sc); j += 4 { // four keys per pass over q
					quant.DotRows4(&s4, q, kt[j*kDim:], kDim)
					copy(sc[j:j+4], s4[:])
				}
				for ; j < len(sc); j++ {
					sc[j] = quant.Dot(q, kt[j*kDim:(j+1)*kDim])
				}
				mx := scaleMax(sc, a.Scale, st.m[k])
				st.raise(k, mx, vDim)
				o := st.acc[k*vDim : (k+1)*vDim]
				st.l[k] += expSum(sc, mx)
				j = 0
				for ; j+4 <= len(sc); j += 4 { // four values per pass over o
					quant.AxpyRows4(o, vt[j*vDim:], vDim, (*[4]float32)(sc[j:j+4]))
				}
				for ; j < len(sc); j++ {
					quant.Axpy(o, vt[j*vDim:(j+1)*vDim], sc[j])
				}
			}
		}
	}
}

type scratch struct{ k, v, scores, m, l, acc, q, qs, p, cf, spare, kp, vp, pad []float32 }

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func (s *scratch) grow(buf *[]float32, n int) []float32 {
	if cap(*buf) < n {
		*buf = make([]float32, n)
	}
	return (*buf)[:n]
}

// parallel runs fn(0..items-1) on up to threads goroutines: the caller's and those of
// the shared crew, which stay alive between the calls of a decode step (internal/crew).
func parallel(threads, items int, fn func(int)) {
	threads = min(threads, items)
	crew.Run(items, items, threads-1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			fn(i)
		}
	})
}

// expNeg is e^x for x <= 0 (softmax exponents after subtracting the max), to about
// 2 ulp: x = k·ln2 + r with |r| <= ln2/2, e^r by a degree-6 polynomial (Chebyshev
// interpolation on that interval). k is rounded by adding and subtracting 1.5·2^23,
// which also leaves k in the sum's low bits for the exponent, and the polynomial is
// summed in Estrin's order: a short chain of dependent operations is what lets the
// vector forms (EXPNEG in fused_amd64.s, which repeats these operations in this order)
// overlap many exponentials.
func expNeg(x float32) float32 {
	if x < -87 {
		return 0 // also -Inf
	}
	y := x*expLog2e + expMagic
	kf := y - expMagic
	r := (x - kf*expLn2Hi) - kf*expLn2Lo
	r2 := r * r
	d := (expC4 + expC5*r) + expC6*r2
	b := expC2 + expC3*r
	p := 1 + (r + r2*(b+r2*d))
	k := math.Float32bits(y) - math.Float32bits(expMagic) // k, as y's ulp is 1
	return p * math.Float32frombits((k+127)<<23)
}

// expNeg's constants: log2(e), the rounding constant 1.5·2^23, ln2 in a high part exact
// in products with k and a low part, and the polynomial's coefficients of r², ..., r⁶
// (those of 1 and r are 1).
const (
	expLog2e, expMagic  float32 = 1.442695041, 12582912
	expLn2Hi, expLn2Lo  float32 = 0.693145751953125, 1.428606765330187e-06
	expC2, expC3, expC4 float32 = 0.5, 0.16666415, 0.04166635
	expC5, expC6        float32 = 0.008375132, 0.0013941117
)

// SoftmaxExp replaces scores sc by e^(score-mx) (mx at least their maximum) and returns their
// sum: the attention kernels' exponential (expNeg, to about 2 ulp; 8 at a time in SIMD where the
// CPU has it), for other softmaxes over long rows (the CPU backend's vision attention).
func SoftmaxExp(sc []float32, mx float32) float32 { return expSum(sc, mx) }
