package cpu

import (
	"os"
	"slices"
	"sync"

	"github.com/mlxg/mlxg/runner/compute"
)

// Batched passes (compute.BatchContext). A product's arithmetic for a row depends on how
// many rows it has: a quantized product of fewer than 4 rows runs the vector kernel per
// row (quantMatVec), from 4 rows a tiled product (gemm), whose sums are ordered
// differently; a float product of one row takes gemmTile's one-token path, of two or more
// its two-token one. So that a sequence's logits do not change when it runs in a batch,
// each segment (a sequence's rows) is computed as it would be alone: the rows of the
// segments that would take a vector path alone go through it together, every weight
// tile read once for all of them while it is in cache (what makes a batched decode step
// cheaper than one step per sequence), and a longer segment (a prefill chunk) goes
// through the plain product alone.

// Segments implements compute.BatchContext.
func (c *context) Segments(rows []int) { c.segs, c.verify = slices.Clone(rows), false }

// VerifyRows implements compute.VerifyContext: segments of one row each, with 8-bit inputs
// only where a one-token step takes them (UseInt8), not as a batch's rows (UseInt8Batches).
func (c *context) VerifyRows(n int) {
	c.segs, c.verify = make([]int, n), true
	for i := range c.segs {
		c.segs[i] = 1
	}
}

// batchInt8 reports whether the decode rows of this context's segments take 8-bit inputs.
func (c *context) batchInt8() bool {
	return c.b.int8 == int8All || c.b.int8 == int8Batches && !c.verify
}

// ConcatRows implements compute.BatchContext.
func (c *context) ConcatRows(xs ...compute.Tensor) compute.Tensor {
	a, ok := c.argList(xs...)
	if !ok {
		return nilTensor
	}
	rows, err := compute.ConcatShape(dims(a), true)
	if err != nil {
		return c.fail("%v", err)
	}
	out := c.newTensor(rows, a[0].cols)
	n := 0
	for _, t := range a {
		n += copy(out.data[n:], t.data[:t.rows*t.cols])
	}
	return out
}

// dims is each tensor's [rows, cols], for compute's shape checks.
func dims(ts []*tensor) [][2]int {
	out := make([][2]int, len(ts))
	for i, t := range ts {
		out[i] = [2]int{t.rows, t.cols}
	}
	return out
}

// linear is Linear's product: per segment when the context's segments add up to T rows.
func (c *context) linear(out, x []float32, T int, w *weight) {
	if len(c.segs) < 2 || sum(c.segs) != T {
		c.b.linear(out, x, T, w)
		return
	}
	c.b.linearSegments(out, x, c.segs, w, c.batchInt8())
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// vectorPath reports whether a product of n rows alone takes a per-row vector path.
func vectorPath(n int, w *weight) bool {
	if w.q.Quantized() {
		return n < 4
	}
	return n == 1
}

// linearSegments computes out = x·wᵀ (+ bias) for x's rows split into segments of segs
// rows, each row's sums ordered as in a product of its segment alone; int8 gives the vector
// rows 8-bit inputs.
func (b *Backend) linearSegments(out, x []float32, segs []int, w *weight, int8 bool) {
	in := w.in
	var vec []int // first rows of the vector segments' rows, one entry per row
	r := 0
	for _, n := range segs {
		if vectorPath(n, w) {
			for i := range n {
				vec = append(vec, r+i)
			}
		} else if n > 0 {
			b.linear(out[r*w.out:(r+n)*w.out], x[r*in:(r+n)*in], n, w)
		}
		r += n
	}
	if len(vec) == 0 {
		return
	}
	// Gather the vector rows (usually every row of a decode step: no copy then).
	xs, ys := x, out
	contiguous := vec[len(vec)-1]-vec[0] == len(vec)-1
	if contiguous {
		xs, ys = x[vec[0]*in:(vec[0]+len(vec))*in], out[vec[0]*w.out:(vec[0]+len(vec))*w.out]
	} else {
		xs, ys = b.alloc(len(vec)*in), b.alloc(len(vec)*w.out)
		defer b.release([][]float32{xs, ys})
		for i, row := range vec {
			copy(xs[i*in:(i+1)*in], x[row*in:(row+1)*in])
		}
	}
	if !exactBatches() {
		b.linear(ys, xs, len(vec), w) // one product of every vector row: tiled from 4 rows
	} else {
		b.vectorRows(ys, xs, len(vec), w, int8)
	}
	if w.bias != nil && exactBatches() {
		for t := range vec {
			addTo(ys[t*w.out:(t+1)*w.out], w.bias)
		}
	}
	if !contiguous {
		for i, row := range vec {
			copy(out[row*w.out:(row+1)*w.out], ys[i*w.out:(i+1)*w.out])
		}
	}
}

// exactBatches is false when MLXG_BATCH_EXACT=0: a batch's decode rows then go through
// one product together, the tiled one from 4 rows (one dequantization of each weight tile
// for every row, far less work per row than the vector kernel), for more throughput at the
// price of logits that differ from a sequence's alone in the last bits (greedy output may
// then differ where two tokens are within float32 rounding of each other).
var exactBatches = sync.OnceValue(func() bool { return os.Getenv("MLXG_BATCH_EXACT") != "0" })

// vectorRows computes the N rows of out = x·wᵀ (no bias), each with the arithmetic of a
// product of that row alone, reading each weight chunk once for all N rows: quantized, it
// is quantMatVec itself, whose rows never depend on each other; float, it follows gemm's
// one-token path step for step (the same split over the threads, tiles and kernel).
func (b *Backend) vectorRows(out, x []float32, N int, w *weight, int8 bool) {
	in := w.in
	if !w.q.Quantized() {
		b.parallel(w.out, rowTile, func(lo, hi int) {
			for o0 := lo; o0 < hi; o0 += rowTile {
				nr := min(rowTile, hi-o0)
				rows := w.f[o0*in : (o0+nr)*in]
				for t := range N {
					gemmTile(out, w.out, x, t, t+1, in, rows, o0, nr)
				}
			}
		})
		return
	}
	b.quantMatVec(out, x, N, w, int8) // reads each 64-row chunk once for every row
}

// moeLinear is a product of an expert's n picked rows, grouped by the sequence they come
// from (picksBySeg rows each, in order), as the expert block of each sequence alone
// computes it.
func (c *context) moeLinear(out, x []float32, n int, w *weight, picksBySeg []int) {
	if picksBySeg == nil {
		c.b.linear(out, x, n, w)
		return
	}
	c.b.linearSegments(out, x, picksBySeg, w, c.batchInt8())
}

// segmentOf returns, for a pass over T rows, each row's segment, or nil when the
// context's segments do not describe T rows (or there is only one).
func (c *context) segmentOf(T int) []int {
	if len(c.segs) < 2 || sum(c.segs) != T {
		return nil
	}
	seg := make([]int, 0, T)
	for s, n := range c.segs {
		for range n {
			seg = append(seg, s)
		}
	}
	return seg
}
