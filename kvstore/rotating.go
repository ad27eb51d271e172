package kvstore

import "fmt"

// Rotating is the sliding-window cache kind (and what --max-kv-size makes of a
// full-attention layer): it keeps the last Window positions in a ring of slots, in any
// Spec, and each query attends to the Window positions ending at its own.
//
// During a prefill chunk of n positions the ring holds Window-1+n slots, since the
// chunk's first query still sees Window-1 positions before it; it shrinks back to
// Window on the next single-position append.
type Rotating struct {
	kvCodecs
	window int
	n      int // positions appended in all (the next absolute position)
	lo     int // the first position still held (positions lo..n-1 are in the ring)
	slots  int // ring size; position p lives in slot p % slots
	k, v   seg // slots×kvHeads rows
}

// NewRotating makes an empty sliding-window cache of window positions that stores
// spec, fp16 until quantizedStart positions.
func NewRotating(kvHeads, kHeadDim, vHeadDim, window int, spec Spec, quantizedStart int) (*Rotating, error) {
	if window <= 0 {
		return nil, fmt.Errorf("kvstore: a sliding-window cache needs a positive window, got %d", window)
	}
	c, err := newKVCodecs(kvHeads, kHeadDim, vHeadDim, spec, quantizedStart)
	if err != nil {
		return nil, err
	}
	return &Rotating{kvCodecs: c, window: window}, nil
}

// Window is the number of positions each query sees.
func (c *Rotating) Window() int { return c.window }

// Len implements Layer: the absolute position count, not the positions held.
func (c *Rotating) Len() int { return c.n }

// Bytes implements Layer: the ring's slots.
func (c *Rotating) Bytes() int64 { return int64(c.slots) * c.positionBytes() }

// resize moves the positions that later queries can still see into a ring of slots.
func (c *Rotating) resize(slots int) {
	k, v := c.kc.newSeg(slots*c.kvHeads), c.vc.newSeg(slots*c.kvHeads)
	c.lo = max(c.lo, c.n-(c.window-1))
	for p := c.lo; p < c.n; p++ {
		for h := 0; h < c.kvHeads; h++ {
			c.kc.copyRow(k, (p%slots)*c.kvHeads+h, c.k, (p%c.slots)*c.kvHeads+h)
			c.vc.copyRow(v, (p%slots)*c.kvHeads+h, c.v, (p%c.slots)*c.kvHeads+h)
		}
	}
	c.k, c.v, c.slots = k, v, slots
}

// Append implements Layer.
func (c *Rotating) Append(k, v []float32, n int) error {
	if err := c.checkAppend(k, v, n); err != nil {
		return err
	}
	k, v = c.rotate(k, v)
	need := min(c.window-1, c.n) + n
	switch {
	case c.exactRows && n > 1 && (c.slots < need || c.slots > c.window && c.slots%c.window != 0):
		// A verification pass: a multiple of the window, so that the ring wraps where a
		// decode step's ring of window slots does (ringView.rows).
		c.resize((need + c.window - 1) / c.window * c.window)
	case c.slots < need: // double while below the window, so that decode grows it rarely
		c.resize(max(need, min(2*c.slots, c.window)))
	case n == 1 && c.slots > c.window: // back from a prefill chunk
		c.resize(c.window)
	}
	kw, vw := c.kvHeads*c.kDim, c.kvHeads*c.vDim
	for i := 0; i < n; i++ {
		c.putPosition(c.k, c.v, (c.n%c.slots)*c.kvHeads, k[i*kw:(i+1)*kw], v[i*vw:(i+1)*vw])
		c.lo = max(c.lo, c.n-c.slots+1) // the position that lived in this slot is gone
		c.n++
	}
	if c.due(c.n) {
		ks, vs := []seg{c.k}, []seg{c.v}
		c.convert(ks, vs, func(int) int { return c.slots * c.kvHeads })
		c.k, c.v = ks[0], vs[0]
	}
	return nil
}

// Truncate implements Layer: it rewinds to n positions when the window before n is still held.
func (c *Rotating) Truncate(n int) error {
	if n < 0 || n > c.n || max(0, n-(c.window-1)) < c.lo {
		return fmt.Errorf("kvstore: cannot truncate a sliding-window cache of %d positions (holding %d onwards) to %d: the positions before it are gone", c.n, c.lo, n)
	}
	c.n = n
	return nil
}

// Attend implements Layer. Rows whose window starts at position 0 attend together;
// each later row attends over its own window, through a view that renumbers the ring
// from the window's first position.
func (c *Rotating) Attend(a Attention) error {
	if a.QV != nil {
		return fmt.Errorf("kvstore: latent attention over a sliding window is not supported")
	}
	return c.rotatedAttend(a, func(a Attention) error {
		if a.Bidirectional == nil {
			return c.attend(a, c.n)
		}
		return attendSpans(a, c.n, c.window, c.attend, func(b Attention, lo, hi int) error {
			if lo < c.lo {
				return fmt.Errorf("kvstore: a bidirectional span needs position %d, but the sliding window holds %d onwards", lo, c.lo)
			}
			return attendTiles(ringView{c, lo}, hi-lo, b)
		})
	})
}

// attend is causal attention for a's rows as the last a.N of the first n positions.
func (c *Rotating) attend(a Attention, n int) error {
	if a.N <= 0 || a.N > n || n > c.n {
		return fmt.Errorf("kvstore: Attend for %d query rows over %d of a cache's %d positions", a.N, n, c.n)
	}
	first := n - a.N
	if lo := max(0, first-(c.window-1)); lo < c.lo {
		return fmt.Errorf("kvstore: Attend for %d query rows needs position %d, but the sliding window holds %d onwards", a.N, lo, c.lo)
	}
	_, kDim, vDim := c.Dims()
	qw, ow := a.Heads*kDim, a.Heads*vDim
	if len(a.Q) != a.N*qw || len(a.Out) != a.N*ow {
		return fmt.Errorf("kvstore: Attend needs %d query and %d output floats for %d rows of %d heads, got %d and %d",
			a.N*qw, a.N*ow, a.N, a.Heads, len(a.Q), len(a.Out))
	}
	// Rows at positions < window see from 0: plain causal attention over [0, n) for them.
	head := min(a.N, max(0, c.window-first))
	if c.exactRows && head > 1 {
		return c.attendHeadRows(a, first, head)
	}
	if head > 0 {
		b := a
		b.N, b.Q, b.Out = head, a.Q[:head*qw], a.Out[:head*ow]
		if err := attendTiles(ringView{c, 0}, first+head, b); err != nil {
			return err
		}
	}
	for i := head; i < a.N; i++ {
		p := first + i
		b := a
		b.N, b.Q, b.Out = 1, a.Q[i*qw:(i+1)*qw], a.Out[i*ow:(i+1)*ow]
		if err := attendTiles(ringView{c, p - (c.window - 1)}, c.window, b); err != nil {
			return err
		}
	}
	return nil
}

// ringView presents the ring's positions base, base+1, ... as 0, 1, ... to attendTiles.
type ringView struct {
	c    *Rotating
	base int
}

func (r ringView) Dims() (int, int, int) { return r.c.Dims() }

func (r ringView) tile(k, v []float32, head, from, to int) {
	c := r.c
	for p := from; p < to; p++ {
		row, i := ((r.base+p)%c.slots)*c.kvHeads+head, p-from
		c.kc.get(k[i*c.kDim:], c.k, row)
		c.vc.get(v[i*c.vDim:], c.v, row)
	}
}

// attendHeadRows is Attend in exact-row mode when head > 1 rows see from position 0: each
// of those rows alone over the positions up to its own, then the later rows as Attend
// does them (one by one already).
func (c *Rotating) attendHeadRows(a Attention, first, head int) error {
	_, kDim, vDim := c.Dims()
	qw, ow := a.Heads*kDim, a.Heads*vDim
	for i := 0; i < a.N; i++ {
		p := first + i
		b := a
		b.N, b.Q, b.Out = 1, a.Q[i*qw:(i+1)*qw], a.Out[i*ow:(i+1)*ow]
		view, length := ringView{c, 0}, p+1
		if i >= head {
			view, length = ringView{c, p - (c.window - 1)}, c.window
		}
		if err := attendTiles(view, length, b); err != nil {
			return err
		}
	}
	return nil
}
