package kvstore

import "fmt"

// kvCodecs is what the quantized kinds share: the layer's dims, its target spec, and
// the codecs its rows use now (fp16 until quantized_kv_start positions, then spec's).
type kvCodecs struct {
	kvHeads, kDim, vDim int
	spec                Spec
	start               int
	kc, vc              rowCodec
	kbuf, vbuf, qbuf    []float32 // rotated copies of a step's keys, values and queries
	qvbuf               []float32 // and of a latent attention's value queries
	rowMode
}

func newKVCodecs(kvHeads, kHeadDim, vHeadDim int, spec Spec, quantizedStart int) (kvCodecs, error) {
	if kvHeads <= 0 || kHeadDim <= 0 || vHeadDim <= 0 || kHeadDim > maxHeadDim || vHeadDim > maxHeadDim {
		return kvCodecs{}, fmt.Errorf("kvstore: a layer cache needs positive KV heads and head dims up to %d, got %d heads, %d and %d", maxHeadDim, kvHeads, kHeadDim, vHeadDim)
	}
	if err := spec.Validate(kHeadDim, vHeadDim); err != nil {
		return kvCodecs{}, err
	}
	if quantizedStart < 0 {
		return kvCodecs{}, fmt.Errorf("kvstore: negative quantized_kv_start %d", quantizedStart)
	}
	c := kvCodecs{kvHeads: kvHeads, kDim: kHeadDim, vDim: vHeadDim, spec: spec, start: quantizedStart}
	now := spec
	if quantizedStart > 0 { // fp16 first, rotated already: the rotation is the layer's for its life
		now = Spec{K: FormatF16.Rotate(spec.K.Rotated), V: FormatF16.Rotate(spec.V.Rotated)}
	}
	c.kc, c.vc = newRowCodec(now.K, kHeadDim), newRowCodec(now.V, vHeadDim)
	return c, nil
}

// Dims implements Layer.
func (c *kvCodecs) Dims() (int, int, int) { return c.kvHeads, c.kDim, c.vDim }

// Spec implements BlockSource: the storage the cache uses now, fp16 before
// quantized_kv_start positions.
func (c *kvCodecs) Spec() Spec { return Spec{K: c.kc.f, V: c.vc.f} }

// Target is the spec the layer stores once past quantized_kv_start (Spec before that is fp16).
func (c *kvCodecs) Target() Spec { return c.spec }

// Converts implements BlockSource: whether the cache still stores fp16 and will switch
// to a quantized spec at quantized_kv_start.
func (c *kvCodecs) Converts() bool { return c.kc.f != c.spec.K || c.vc.f != c.spec.V }

// positionBytes is the storage of one position over all heads.
func (c *kvCodecs) positionBytes() int64 {
	return int64(c.kvHeads) * int64(c.kc.bytes()+c.vc.bytes())
}

func (c *kvCodecs) checkAppend(k, v []float32, n int) error {
	kw, vw := c.kvHeads*c.kDim, c.kvHeads*c.vDim
	if n < 0 || len(k) != n*kw || len(v) != n*vw {
		return fmt.Errorf("kvstore: Append of %d positions needs %d key and %d value floats, got %d and %d", n, n*kw, n*vw, len(k), len(v))
	}
	return nil
}

// rotate returns a step's keys and values as they are stored: rotated head by head
// where the spec says so.
func (c *kvCodecs) rotate(k, v []float32) ([]float32, []float32) {
	return rotateIn(&c.kbuf, k, c.kDim, c.spec.K.Rotated), rotateIn(&c.vbuf, v, c.vDim, c.spec.V.Rotated)
}

// due reports whether a cache of length positions must now convert to its spec.
func (c *kvCodecs) due(length int) bool {
	return length >= c.start && (c.kc.f != c.spec.K || c.vc.f != c.spec.V)
}

// convert re-encodes segs (rows of kvHeads×dim) from the current codecs to the
// spec's, one row at a time, and switches the codecs.
func (c *kvCodecs) convert(ks, vs []seg, rows func(i int) int) {
	nk, nv := newRowCodec(c.spec.K, c.kDim), newRowCodec(c.spec.V, c.vDim)
	kbuf, vbuf := make([]float32, c.kDim), make([]float32, c.vDim)
	for i := range ks {
		n := rows(i)
		k, v := nk.newSeg(n), nv.newSeg(n)
		for r := 0; r < n; r++ {
			c.kc.get(kbuf, ks[i], r)
			nk.put(k, r, kbuf)
			c.vc.get(vbuf, vs[i], r)
			nv.put(v, r, vbuf)
		}
		ks[i], vs[i] = k, v
	}
	c.kc, c.vc = nk, nv
}

// putPosition encodes position p's keys and values (kvHeads rows each) at rows
// row..row+kvHeads-1 of segs k and v.
func (c *kvCodecs) putPosition(ks, vs seg, row int, k, v []float32) {
	for h := 0; h < c.kvHeads; h++ {
		c.kc.put(ks, row+h, k[h*c.kDim:(h+1)*c.kDim])
		c.vc.put(vs, row+h, v[h*c.vDim:(h+1)*c.vDim])
	}
}

// Quantized is the full-attention cache kind in any Spec (affine or q4_0 keys and
// values, each possibly fp16): it grows by blocks of BlockTokens positions, and its
// attention dequantizes one tile of one head at a time inside the loop.
type Quantized struct {
	kvCodecs
	n      int
	kb, vb []seg // blocks of BlockTokens×kvHeads rows
	shared int   // leading blocks handed to the prefix cache by reference: copied before a write
}

// NewQuantized makes an empty full-attention cache that stores spec, fp16 until
// quantizedStart positions (0: quantized from the first).
func NewQuantized(kvHeads, kHeadDim, vHeadDim int, spec Spec, quantizedStart int) (*Quantized, error) {
	c, err := newKVCodecs(kvHeads, kHeadDim, vHeadDim, spec, quantizedStart)
	if err != nil {
		return nil, err
	}
	return &Quantized{kvCodecs: c}, nil
}

// Len implements Layer.
func (c *Quantized) Len() int { return c.n }

// Bytes implements Layer: the stored positions at the current spec's size.
func (c *Quantized) Bytes() int64 { return int64(c.n) * c.positionBytes() }

// Append implements Layer; the cache converts to its spec when it reaches quantized_kv_start.
func (c *Quantized) Append(k, v []float32, n int) error {
	if err := c.checkAppend(k, v, n); err != nil {
		return err
	}
	k, v = c.rotate(k, v)
	kw, vw := c.kvHeads*c.kDim, c.kvHeads*c.vDim
	for i := 0; i < n; i++ {
		b, off := c.n/BlockTokens, c.n%BlockTokens
		if b == len(c.kb) {
			c.kb = append(c.kb, c.kc.newSeg(BlockTokens*c.kvHeads))
			c.vb = append(c.vb, c.vc.newSeg(BlockTokens*c.kvHeads))
		}
		c.putPosition(c.kb[b], c.vb[b], off*c.kvHeads, k[i*kw:(i+1)*kw], v[i*vw:(i+1)*vw])
		c.n++
	}
	if c.due(c.n) {
		c.convert(c.kb, c.vb, func(int) int { return BlockTokens * c.kvHeads })
	}
	return nil
}

// Truncate implements Layer. Blocks past the new end are released; a cache that has
// converted stays quantized.
func (c *Quantized) Truncate(n int) error {
	if n < 0 || n > c.n {
		return fmt.Errorf("kvstore: cannot truncate a cache of %d positions to %d", c.n, n)
	}
	privatize(&c.shared, n, c.unshare)
	keep := (n + BlockTokens - 1) / BlockTokens
	c.kb, c.vb = c.kb[:keep], c.vb[:keep]
	c.n = n
	return nil
}

// Attend implements Layer.
func (c *Quantized) Attend(a Attention) error {
	return c.rotatedAttend(a, func(a Attention) error {
		if a.QV != nil {
			if a.Bidirectional != nil {
				return fmt.Errorf("kvstore: latent attention with bidirectional spans is not supported")
			}
			return attendLatent(c, c.n, a)
		}
		if a.Bidirectional != nil {
			return attendSpans(a, c.n, 0, c.attendPrefix, func(b Attention, _, hi int) error { return attendTiles(c, hi, b) })
		}
		return c.attendPrefix(a, c.n)
	})
}

// attendPrefix is causal attention for a's rows as the last a.N of the first n positions.
func (c *Quantized) attendPrefix(a Attention, n int) error {
	if c.exactRows && a.N > 1 {
		return attendRows(c, n, a)
	}
	return attendTiles(c, n, a)
}

// tile implements tiler: dequantize head's keys and values at positions [from, to) of one block.
func (c *Quantized) tile(k, v []float32, head, from, to int) {
	b := from / BlockTokens
	for p := from; p < to; p++ {
		row, r := (p%BlockTokens)*c.kvHeads+head, p-from
		c.kc.get(k[r*c.kDim:], c.kb[b], row)
		c.vc.get(v[r*c.vDim:], c.vb[b], row)
	}
}

// codecs implements fusedSource.
func (c *kvCodecs) codecs() (k, v rowCodec) { return c.kc, c.vc }

// rows implements fusedSource: a tile never crosses a block, so [from, to) is one run.
func (c *Quantized) rows(head, from, to int) (k, v seg, stride, n int) {
	b, row := from/BlockTokens, (from%BlockTokens)*c.kvHeads+head
	kb, vb := c.kb[b], c.vb[b]
	return seg{kb.codes[row*c.kc.words:], kb.halfs[row*c.kc.halfs:]},
		seg{vb.codes[row*c.vc.words:], vb.halfs[row*c.vc.halfs:]}, c.kvHeads, to - from
}
