package kvstore

import "fmt"

// Speculative decoding runs a drafted continuation through the model in one pass and keeps
// the prefix the model agrees with. For its output to be the output of plain decoding,
// each row of that pass must compute what a decode step at its position computes, and
// rejected positions must be undone. The helpers here serve that: exact rows (each query
// row attends as a one-row step at its position would, with the same split over threads and
// the same kernels), the position at which a cache converts from fp16 to its quantized
// spec (a pass crossing it would attend its earlier rows over the converted codes), and
// dropping a recurrent checkpoint once a verified pass no longer needs it.

// rowMode is a cache's attention mode for verification passes.
type rowMode struct{ exactRows bool }

// SetExactRows makes Attend compute every query row as a one-row Attend at that row's
// position computes it (on), or the rows together (off, the default: a prefill).
func (m *rowMode) SetExactRows(on bool) { m.exactRows = on }

// ExactRowser is a cache whose attention can run row by row (SetExactRows).
type ExactRowser interface{ SetExactRows(on bool) }

// SetExactRows sets the exact-row mode of every cache that has one.
func SetExactRows(caches []Layer, on bool) {
	for _, c := range caches {
		if r, ok := c.(ExactRowser); ok {
			r.SetExactRows(on)
		}
	}
}

// attendRows runs attendTiles for each of a's rows alone, row i over the first
// length-a.N+i+1 positions, as a decode step at that position does.
func attendRows(t tiler, length int, a Attention) error {
	if a.N <= 0 || a.N > length {
		return fmt.Errorf("kvstore: Attend for %d query rows over a cache of %d positions", a.N, length)
	}
	_, kDim, vDim := t.Dims()
	qw, ow := a.Heads*kDim, a.Heads*vDim
	if len(a.Q) != a.N*qw || len(a.Out) != a.N*ow {
		return fmt.Errorf("kvstore: Attend needs %d query and %d output floats for %d rows of %d heads, got %d and %d",
			a.N*qw, a.N*ow, a.N, a.Heads, len(a.Q), len(a.Out))
	}
	first := length - a.N
	for i := 0; i < a.N; i++ {
		b := a
		b.N, b.Q, b.Out = 1, a.Q[i*qw:(i+1)*qw], a.Out[i*ow:(i+1)*ow]
		if err := attendTiles(t, first+i+1, b); err != nil {
			return err
		}
	}
	return nil
}

// ConversionAt is the length at which the cache converts from fp16 to its quantized
// spec (the length whose Append converts), or -1 when it never will or already has.
func (c *kvCodecs) ConversionAt() int {
	if !c.Converts() {
		return -1
	}
	return max(c.start, 1)
}

// NextConversion returns the smallest length at which one of caches converts from fp16
// to its quantized spec, or -1 when none will. A pass of several rows that starts below
// it and ends at or past it attends its earlier rows over codes that a step-by-step
// decode would not have yet; a verification pass stops short of it, or starts at it.
func NextConversion(caches []Layer) int {
	at := -1
	for _, c := range caches {
		r, ok := c.(interface{ ConversionAt() int })
		if !ok {
			continue
		}
		if n := r.ConversionAt(); n >= 0 && (at < 0 || n < at) {
			at = n
		}
	}
	return at
}

// HasCheckpoint reports whether the state has a checkpoint at position n.
func (r *Recurrent) HasCheckpoint(n int) bool {
	_, ok := r.checkpoints[n]
	return ok
}

// DropCheckpoint forgets the checkpoint at position n, if any.
func (r *Recurrent) DropCheckpoint(n int) { delete(r.checkpoints, n) }
