package kvstore

import (
	"fmt"
	"slices"
)

// What the layer kinds give the prefix cache: a full-attention layer hands out its full
// 256-token blocks by reference (immutable from then on: the layer copies a shared block
// before it would write into it) and its last, partial block as a copy; a sliding-window
// layer and a recurrent state hand out a snapshot of what a later position still needs.
// An empty layer accepts them back.

// page is one full-attention layer's keys and values at the positions of one block, in
// the storage they were written in: rows×kvHeads head rows of each codec.
type page struct {
	kf, vf              Format
	kvHeads, kDim, vDim int
	rows                int // positions: BlockTokens, or fewer for a prefix that ends mid-block
	k, v                seg
}

func (p *page) bytes() int64 { return segBytes(p.k) + segBytes(p.v) }

func segBytes(s seg) int64 { return 4*int64(len(s.codes)) + 2*int64(len(s.halfs)) }

// ring is a sliding-window layer's snapshot: the rows positions before n that a query at
// n or later can still see, oldest first.
type ring struct {
	kf, vf              Format
	kvHeads, kDim, vDim int
	window, n, rows     int
	k, v                seg
}

func (r *ring) bytes() int64 { return segBytes(r.k) + segBytes(r.v) }

// cutSeg copies the first rows rows of s.
func cutSeg(c rowCodec, s seg, rows int) seg {
	return seg{codes: slices.Clone(s.codes[:rows*c.words]), halfs: slices.Clone(s.halfs[:rows*c.halfs])}
}

// privatize is called by Truncate(n) of Full and Quantized: a shared block that position
// n falls inside is copied, since the next Append writes into it.
func privatize(shared *int, n int, cp func(b int)) {
	if b := n / BlockTokens; n%BlockTokens != 0 && b < *shared {
		cp(b)
	}
	*shared = min(*shared, n/BlockTokens)
}

func checkPage(p *page, kvHeads, kDim, vDim int, kf, vf Format) error {
	if p.kvHeads != kvHeads || p.kDim != kDim || p.vDim != vDim || p.kf != kf || p.vf != vf {
		return fmt.Errorf("kvstore: a prefix block of %d heads, dims %d/%d, %s/%s does not fit a cache of %d heads, dims %d/%d, %s/%s",
			p.kvHeads, p.kDim, p.vDim, p.kf, p.vf, kvHeads, kDim, vDim, kf, vf)
	}
	return nil
}

// checkPages verifies that pages can follow each other from position 0: every page full
// but the last.
func checkPages(ps []*page) error {
	for i, p := range ps {
		if p.rows <= 0 || p.rows > BlockTokens || p.rows < BlockTokens && i < len(ps)-1 {
			return fmt.Errorf("kvstore: prefix block %d holds %d positions: only the last may be partial", i, p.rows)
		}
	}
	return nil
}

// exportPage returns block b: by reference when full, as a copy when it is the partial
// last block. A float32 cache (exact references) has no shareable storage.
func (c *Full) exportPage(b int) (*page, bool) {
	if c.fp32 || b < 0 || b*BlockTokens >= c.n {
		return nil, false
	}
	kw, vw := c.kvHeads*c.kDim, c.kvHeads*c.vDim
	p := &page{kf: FormatF16, vf: FormatF16, kvHeads: c.kvHeads, kDim: c.kDim, vDim: c.vDim, rows: min(BlockTokens, c.n-b*BlockTokens)}
	if p.rows == BlockTokens {
		p.k, p.v = seg{halfs: c.k16[b]}, seg{halfs: c.v16[b]}
		c.shared = max(c.shared, b+1)
	} else {
		p.k, p.v = seg{halfs: slices.Clone(c.k16[b][:p.rows*kw])}, seg{halfs: slices.Clone(c.v16[b][:p.rows*vw])}
	}
	return p, true
}

// importPages fills an empty cache with ps: full pages by reference, a partial last page copied.
func (c *Full) importPages(ps []*page) error {
	if c.fp32 || c.n != 0 {
		return fmt.Errorf("kvstore: a prefix can only be restored into an empty fp16 cache")
	}
	if err := checkPages(ps); err != nil {
		return err
	}
	kw, vw := c.kvHeads*c.kDim, c.kvHeads*c.vDim
	for _, p := range ps {
		if err := checkPage(p, c.kvHeads, c.kDim, c.vDim, FormatF16, FormatF16); err != nil {
			return err
		}
	}
	for _, p := range ps {
		if p.rows == BlockTokens {
			c.k16, c.v16 = append(c.k16, p.k.halfs), append(c.v16, p.v.halfs)
			c.shared = len(c.k16)
		} else {
			k, v := blockSlice[uint16](BlockTokens*kw), blockSlice[uint16](BlockTokens*vw)
			copy(k, p.k.halfs)
			copy(v, p.v.halfs)
			c.k16, c.v16 = append(c.k16, k), append(c.v16, v)
		}
		c.n += p.rows
	}
	return nil
}

func (c *Full) unshare(b int) {
	c.k16[b], c.v16[b] = slices.Clone(c.k16[b]), slices.Clone(c.v16[b])
}

// exportPage returns block b in the cache's current storage, by reference when full.
func (c *Quantized) exportPage(b int) (*page, bool) {
	if b < 0 || b*BlockTokens >= c.n {
		return nil, false
	}
	p := &page{kf: c.kc.f, vf: c.vc.f, kvHeads: c.kvHeads, kDim: c.kDim, vDim: c.vDim, rows: min(BlockTokens, c.n-b*BlockTokens)}
	if p.rows == BlockTokens {
		p.k, p.v = c.kb[b], c.vb[b]
		c.shared = max(c.shared, b+1)
	} else {
		p.k, p.v = cutSeg(c.kc, c.kb[b], p.rows*c.kvHeads), cutSeg(c.vc, c.vb[b], p.rows*c.kvHeads)
	}
	return p, true
}

// importPages fills an empty cache with ps, which must be in the storage the cache uses
// now (fp16 pages before quantized_kv_start, the spec's after).
func (c *Quantized) importPages(ps []*page) error {
	if c.n != 0 {
		return fmt.Errorf("kvstore: a prefix can only be restored into an empty cache")
	}
	if err := checkPages(ps); err != nil {
		return err
	}
	for _, p := range ps {
		if err := checkPage(p, c.kvHeads, c.kDim, c.vDim, c.kc.f, c.vc.f); err != nil {
			return err
		}
	}
	for _, p := range ps {
		if p.rows == BlockTokens {
			c.kb, c.vb = append(c.kb, p.k), append(c.vb, p.v)
			c.shared = len(c.kb)
		} else {
			k, v := c.kc.newSeg(BlockTokens*c.kvHeads), c.vc.newSeg(BlockTokens*c.kvHeads)
			copy(k.codes, p.k.codes)
			copy(k.halfs, p.k.halfs)
			copy(v.codes, p.v.codes)
			copy(v.halfs, p.v.halfs)
			c.kb, c.vb = append(c.kb, k), append(c.vb, v)
		}
		c.n += p.rows
	}
	if c.due(c.n) { // as Append would have
		c.convert(c.kb, c.vb, func(int) int { return BlockTokens * c.kvHeads })
	}
	return nil
}

func (c *Quantized) unshare(b int) {
	c.kb[b] = cutSeg(c.kc, c.kb[b], BlockTokens*c.kvHeads)
	c.vb[b] = cutSeg(c.vc, c.vb[b], BlockTokens*c.kvHeads)
}

// exportRing copies the positions a later query can still see.
func (c *Rotating) exportRing() *ring {
	lo := max(c.lo, c.n-(c.window-1))
	r := &ring{kf: c.kc.f, vf: c.vc.f, kvHeads: c.kvHeads, kDim: c.kDim, vDim: c.vDim, window: c.window, n: c.n, rows: c.n - lo}
	r.k, r.v = c.kc.newSeg(r.rows*c.kvHeads), c.vc.newSeg(r.rows*c.kvHeads)
	for p := lo; p < c.n; p++ {
		for h := 0; h < c.kvHeads; h++ {
			c.kc.copyRow(r.k, (p-lo)*c.kvHeads+h, c.k, (p%c.slots)*c.kvHeads+h)
			c.vc.copyRow(r.v, (p-lo)*c.kvHeads+h, c.v, (p%c.slots)*c.kvHeads+h)
		}
	}
	return r
}

// importRing restores an empty cache to the snapshot r.
func (c *Rotating) importRing(r *ring) error {
	if c.n != 0 {
		return fmt.Errorf("kvstore: a prefix can only be restored into an empty cache")
	}
	if r.window != c.window || r.rows != min(r.n, c.window-1) {
		return fmt.Errorf("kvstore: a sliding-window snapshot of %d positions before %d (window %d) does not fit a window of %d", r.rows, r.n, r.window, c.window)
	}
	if err := checkPage(&page{kf: r.kf, vf: r.vf, kvHeads: r.kvHeads, kDim: r.kDim, vDim: r.vDim}, c.kvHeads, c.kDim, c.vDim, c.kc.f, c.vc.f); err != nil {
		return err
	}
	c.slots = max(r.rows, 1)
	c.k, c.v = c.kc.newSeg(c.slots*c.kvHeads), c.vc.newSeg(c.slots*c.kvHeads)
	c.n, c.lo = r.n, r.n-r.rows
	for p := c.lo; p < c.n; p++ {
		for h := 0; h < c.kvHeads; h++ {
			c.kc.copyRow(c.k, (p%c.slots)*c.kvHeads+h, r.k, (p-c.lo)*c.kvHeads+h)
			c.vc.copyRow(c.v, (p%c.slots)*c.kvHeads+h, r.v, (p-c.lo)*c.kvHeads+h)
		}
	}
	if c.due(c.n) {
		ks, vs := []seg{c.k}, []seg{c.v}
		c.convert(ks, vs, func(int) int { return c.slots * c.kvHeads })
		c.k, c.v = ks[0], vs[0]
	}
	return nil
}

// exportState copies the recurrent state at the current position.
func (r *Recurrent) exportState() [][]float32 { return cloneState(r.state) }

// importState restores a state that has consumed n positions.
func (r *Recurrent) importState(s [][]float32, n int) error {
	if len(s) != len(r.sizes) {
		return fmt.Errorf("kvstore: a recurrent checkpoint of %d tensors for a state of %d", len(s), len(r.sizes))
	}
	for i, t := range s {
		if len(t) != r.sizes[i] {
			return fmt.Errorf("kvstore: recurrent checkpoint tensor %d has %d elements, the state %d", i, len(t), r.sizes[i])
		}
	}
	for i, t := range s {
		copy(r.state[i], t)
	}
	r.n = n
	clear(r.checkpoints)
	return nil
}

// describeLayer spells a layer cache's kind, shape and storage for the model key; ok is
// false for a kind the prefix cache cannot share (a float32 reference cache, an unknown kind).
// keyFormat spells f in a model key: an unrotated format as it always was (so that
// blocks already on SSD keep their keys), a rotated one with " rotated" after it.
func keyFormat(f Format) string {
	out := fmt.Sprintf("{Mode:%d Bits:%d Group:%d}", f.Mode, f.Bits, f.Group)
	if f.Rotated {
		out += " rotated"
	}
	return out
}

func describeLayer(l Layer) (string, bool) {
	switch c := l.(type) {
	case nil:
		return "none", true
	case *Full:
		if c == nil || c.fp32 {
			return "", false
		}
		return fmt.Sprintf("full h%d k%d v%d %v/%v", c.kvHeads, c.kDim, c.vDim, FormatF16, FormatF16), true
	case *Quantized:
		if c == nil {
			return "", false
		}
		return fmt.Sprintf("full h%d k%d v%d %s/%s start%d", c.kvHeads, c.kDim, c.vDim, keyFormat(c.spec.K), keyFormat(c.spec.V), c.start), true
	case *Rotating:
		if c == nil {
			return "", false
		}
		return fmt.Sprintf("ring w%d h%d k%d v%d %s/%s start%d", c.window, c.kvHeads, c.kDim, c.vDim, keyFormat(c.spec.K), keyFormat(c.spec.V), c.start), true
	}
	return "", false
}
