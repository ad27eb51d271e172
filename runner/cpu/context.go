package cpu

import (
	"fmt"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/residency"
)

// tensor is a row-major float32 activation; data may be a view into buf, the
// context buffer that holds it.
type tensor struct {
	rows, cols int
	data, buf  []float32
}

func (t *tensor) Dims() (int, int) { return t.rows, t.cols }

// nilTensor stands in for results after an error.
var nilTensor = &tensor{}

type context struct {
	b      *Backend
	err    error
	bufs   [][]float32
	serial uint64
	segs   []int // a batched pass's rows per sequence (batch.go)
	verify bool  // segs are one sequence's next positions (VerifyRows)
	slab   *slab // where this context's tensor headers come from
	// layer is the streamed dense layer whose unit the pass holds (dense.go).
	layer     *layerGroup
	layerHeld residency.Handle
	// guessed: units GuessExperts expects, handed to their manager by the next MoE
	// after its own reads (stream.go).
	guessed []guessedUnit
}

// slab holds a context's tensor headers, reused by the next context once Closed: a decode
// step makes some 400 tensors, and allocating each header separately would make them
// most of what a step leaves to the collector.
type slab struct {
	chunks [][]tensor
	n      int         // headers handed out
	bufs   [][]float32 // the context's buffer list, kept for its capacity
}

const slabChunk = 128

func (s *slab) next() *tensor {
	i, j := s.n/slabChunk, s.n%slabChunk
	if i == len(s.chunks) {
		s.chunks = append(s.chunks, make([]tensor, slabChunk))
	}
	s.n++
	return &s.chunks[i][j]
}

// reset drops what the headers point at, so that buffers the pool lets go of (trim) are
// not kept alive by stale headers.
func (s *slab) reset() {
	for i := 0; i*slabChunk < s.n; i++ {
		clear(s.chunks[i][:min(slabChunk, s.n-i*slabChunk)])
	}
	s.n = 0
}

// NewContext implements compute.Backend.
func (b *Backend) NewContext() compute.Context {
	s := b.getSlab()
	return &context{b: b, serial: b.newSerial(), slab: s, bufs: s.bufs[:0]}
}

func (c *context) Err() error { return c.err }

func (c *context) Free(keep ...compute.Tensor) {
	// Kept buffers move to the front of c.bufs, the others are released: in place, as
	// Free runs once per layer.
	k := 0
	for i, buf := range c.bufs {
		for _, t := range keep {
			if t, ok := t.(*tensor); ok && len(t.buf) > 0 && &t.buf[0] == &buf[0] {
				c.bufs[k], c.bufs[i] = c.bufs[i], c.bufs[k]
				k++
				break
			}
		}
	}
	c.b.release(c.bufs[k:])
	clear(c.bufs[k:])
	c.bufs = c.bufs[:k]
}

func (c *context) Close() {
	c.releaseLayer()
	c.b.release(c.bufs)
	clear(c.bufs)
	if c.slab != nil {
		c.slab.bufs = c.bufs[:0]
		c.b.putSlab(c.slab)
		c.slab = nil
	}
	c.bufs = nil
	c.b.trim(c.serial)
}

func (c *context) fail(format string, args ...any) compute.Tensor {
	if c.err == nil {
		c.err = fmt.Errorf("compute: "+format, args...)
	}
	return nilTensor
}

// header returns a zeroed tensor header from the context's slab.
func (c *context) header() *tensor {
	if c.slab == nil { // used after Close: let the collector have it
		return &tensor{}
	}
	return c.slab.next()
}

func (c *context) newTensor(rows, cols int) *tensor {
	buf := c.b.alloc(rows * cols)
	c.bufs = append(c.bufs, buf)
	t := c.header()
	*t = tensor{rows: rows, cols: cols, data: buf, buf: buf}
	return t
}

// view is a tensor over (part of) another's buffer.
func (c *context) view(rows, cols int, data, buf []float32) *tensor {
	t := c.header()
	*t = tensor{rows: rows, cols: cols, data: data, buf: buf}
	return t
}

// maxArgs is the most tensors an op with a fixed number of them takes.
const maxArgs = 5

// args converts an op's arguments to CPU tensors, or reports false after an error. The
// result is an array, not a slice, so that it stays on the caller's stack.
func (c *context) args(ts ...compute.Tensor) (out [maxArgs]*tensor, ok bool) {
	if c.err != nil {
		return out, false
	}
	if len(ts) > maxArgs {
		c.fail("an op of %d tensor arguments (at most %d)", len(ts), maxArgs)
		return out, false
	}
	for i, t := range ts {
		if out[i], ok = c.arg(i, t); !ok {
			return out, false
		}
	}
	return out, true
}

// argList is args for ops of any number of tensors (the concatenations).
func (c *context) argList(ts ...compute.Tensor) ([]*tensor, bool) {
	if c.err != nil {
		return nil, false
	}
	out := make([]*tensor, len(ts))
	for i, t := range ts {
		var ok bool
		if out[i], ok = c.arg(i, t); !ok {
			return nil, false
		}
	}
	return out, true
}

func (c *context) arg(i int, t compute.Tensor) (*tensor, bool) {
	ct, ok := t.(*tensor)
	if !ok || ct == nilTensor {
		c.fail("tensor argument %d is not a CPU tensor of this context", i)
		return nil, false
	}
	return ct, true
}

func (c *context) Embed(w compute.Weight, ids []int32) compute.Tensor {
	if c.err != nil {
		return nilTensor
	}
	cw, ok := w.(*weight)
	if !ok {
		return c.fail("Embed: weight is not a CPU weight")
	}
	for _, id := range ids {
		if id < 0 || int(id) >= cw.out {
			return c.fail("token id %d is outside the vocabulary of %d entries of %q", id, cw.out, cw.name)
		}
	}
	out := c.newTensor(len(ids), cw.in)
	if c.b.single(len(ids), 1) { // a decode step: no closure to allocate
		for i := range ids {
			cw.embedRow(out.data[i*cw.in:(i+1)*cw.in], int(ids[i]))
		}
		return out
	}
	c.b.parallel(len(ids), 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			cw.embedRow(out.data[i*cw.in:(i+1)*cw.in], int(ids[i]))
		}
	})
	return out
}

func (c *context) Linear(x compute.Tensor, w compute.Weight) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	cw, ok := w.(*weight)
	if !ok {
		return c.fail("Linear: weight is not a CPU weight")
	}
	cw, err := c.resolve(cw)
	if err != nil {
		return c.fail("Linear: %v", err)
	}
	if a[0].cols != cw.in {
		return c.fail("Linear %q: input has %d columns, the layer takes %d", cw.name, a[0].cols, cw.in)
	}
	out := c.newTensor(a[0].rows, cw.out)
	c.linear(out.data, a[0].data, a[0].rows, cw)
	return out
}

func (c *context) RMSNorm(x compute.Tensor, w compute.Vector, eps float32) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	v, ok := w.(vector)
	if !ok || len(v) != a[0].cols {
		return c.fail("RMSNorm: weight of %d values for rows of %d", w.Len(), a[0].cols)
	}
	out := c.newTensor(a[0].rows, a[0].cols)
	cols := a[0].cols
	if c.b.single(a[0].rows, 8) {
		rmsNorm(out.data, a[0].data, v, cols, eps)
		return out
	}
	c.b.parallel(a[0].rows, 8, func(lo, hi int) {
		rmsNorm(out.data[lo*cols:hi*cols], a[0].data[lo*cols:hi*cols], v, cols, eps)
	})
	return out
}

func (c *context) Reshape(x compute.Tensor, rows, cols int) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	if rows*cols != a[0].rows*a[0].cols || rows < 0 {
		return c.fail("Reshape of %d×%d to %d×%d", a[0].rows, a[0].cols, rows, cols)
	}
	return c.view(rows, cols, a[0].data, a[0].buf)
}

func (c *context) RoPE(x compute.Tensor, r *compute.RoPE, headDim, offset int) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	t := a[0]
	if headDim <= 0 || t.cols%headDim != 0 || r.Dims > headDim || offset < 0 {
		return c.fail("RoPE of %d columns with head size %d, %d rotated dims, offset %d", t.cols, headDim, r.Dims, offset)
	}
	tab := c.b.ropeTable(r, offset+t.rows)
	out := c.newTensor(t.rows, t.cols)
	copy(out.data, t.data)
	half := r.Dims / 2
	if c.b.single(t.rows, 4) {
		ropeRows(out, tab, headDim, half, offset, 0, t.rows, r.Interleaved)
		return out
	}
	c.b.parallel(t.rows, 4, func(lo, hi int) { ropeRows(out, tab, headDim, half, offset, lo, hi, r.Interleaved) })
	return out
}

// ropeRows rotates rows [lo, hi) of x in place, row i at position offset+i.
func ropeRows(x *tensor, tab *ropeTable, headDim, half, offset, lo, hi int, interleaved bool) {
	rot := ropeRow
	if interleaved {
		rot = ropeRowInterleaved
	}
	for i := lo; i < hi; i++ {
		p := offset + i
		rot(x.data[i*x.cols:(i+1)*x.cols], headDim, tab.cos[p*half:(p+1)*half], tab.sin[p*half:(p+1)*half])
	}
}

func (c *context) Attention(q, k, v compute.Tensor, cache kvstore.Layer, heads int, scale float32) compute.Tensor {
	return c.attention(q, k, v, cache, heads, scale, nil, nil)
}

// AttentionSpans implements compute.SpanAttentionContext: kvstore widens the spans' rows.
func (c *context) AttentionSpans(q, k, v compute.Tensor, cache kvstore.Layer, heads int, scale float32, spans []kvstore.Span) compute.Tensor {
	return c.attention(q, k, v, cache, heads, scale, nil, spans)
}

// AttentionSinks implements compute.SinkAttentionContext: kvstore applies the sinks
// where each kind normalises its softmax.
func (c *context) AttentionSinks(q, k, v compute.Tensor, cache kvstore.Layer, heads int, scale float32, sinks compute.Vector) compute.Tensor {
	s, ok := sinks.(vector)
	if !ok || len(s) != heads {
		return c.fail("AttentionSinks: want %d sink logits as a CPU vector, got %T of %d", heads, sinks, sinks.Len())
	}
	return c.attention(q, k, v, cache, heads, scale, s, nil)
}

// AttentionShared implements compute.SharedKVContext: the cache's own Attend over
// the positions its layer appended, kvstore widening the spans' rows.
func (c *context) AttentionShared(q compute.Tensor, cache kvstore.Layer, heads int, scale float32, spans []kvstore.Span) compute.Tensor {
	a, ok := c.args(q)
	if !ok {
		return nilTensor
	}
	kvHeads, kDim, vDim := cache.Dims()
	T := a[0].rows
	if heads <= 0 || kvHeads <= 0 || heads%kvHeads != 0 || a[0].cols != heads*kDim || T > cache.Len() {
		return c.fail("AttentionShared: q %d×%d does not fit %d heads over a cache of %d KV heads of %d dims holding %d positions",
			a[0].rows, a[0].cols, heads, kvHeads, kDim, cache.Len())
	}
	out := c.newTensor(T, heads*vDim)
	if err := cache.Attend(kvstore.Attention{Q: a[0].data, Out: out.data, N: T, Heads: heads, Scale: scale, Threads: c.b.threads, Bidirectional: spans}); err != nil {
		return c.fail("AttentionShared: %v", err)
	}
	return out
}

func (c *context) attention(q, k, v compute.Tensor, cache kvstore.Layer, heads int, scale float32, sinks []float32, spans []kvstore.Span) compute.Tensor {
	a, ok := c.args(q, k, v)
	if !ok {
		return nilTensor
	}
	kvHeads, kDim, vDim := cache.Dims()
	T := a[0].rows
	if a[1].rows != T || a[2].rows != T || a[0].cols != heads*kDim || a[1].cols != kvHeads*kDim || a[2].cols != kvHeads*vDim {
		return c.fail("Attention: q %d×%d, k %d×%d, v %d×%d do not fit %d heads over a cache of %d KV heads of %d/%d dims",
			a[0].rows, a[0].cols, a[1].rows, a[1].cols, a[2].rows, a[2].cols, heads, kvHeads, kDim, vDim)
	}
	if err := cache.Append(a[1].data, a[2].data, T); err != nil {
		return c.fail("Attention: %v", err)
	}
	out := c.newTensor(T, heads*vDim)
	err := cache.Attend(kvstore.Attention{Q: a[0].data, Out: out.data, N: T, Heads: heads, Scale: scale, Threads: c.b.threads, Sinks: sinks, Bidirectional: spans})
	if err != nil {
		return c.fail("Attention: %v", err)
	}
	return out
}

func (c *context) SwiGLU(gate, up compute.Tensor) compute.Tensor {
	return c.elementwise("SwiGLU", gate, up, quant.SwiGLU)
}

func (c *context) Add(x, y compute.Tensor) compute.Tensor {
	return c.elementwise("Add", x, y, func(o, a, b []float32) {
		b = b[:len(a)]
		for i := range a {
			o[i] = a[i] + b[i]
		}
	})
}

func (c *context) Mul(x, y compute.Tensor) compute.Tensor {
	return c.elementwise("Mul", x, y, func(o, a, b []float32) {
		b = b[:len(a)]
		for i := range a {
			o[i] = a[i] * b[i]
		}
	})
}

func (c *context) elementwise(op string, x, y compute.Tensor, fn func(o, a, b []float32)) compute.Tensor {
	a, ok := c.args(x, y)
	if !ok {
		return nilTensor
	}
	if a[0].rows != a[1].rows || a[0].cols != a[1].cols {
		return c.fail("%s of %d×%d and %d×%d", op, a[0].rows, a[0].cols, a[1].rows, a[1].cols)
	}
	out := c.newTensor(a[0].rows, a[0].cols)
	n := len(out.data)
	if c.b.single(n, 1<<14) {
		fn(out.data, a[0].data[:n], a[1].data[:n])
		return out
	}
	c.b.parallel(n, 1<<14, func(lo, hi int) { fn(out.data[lo:hi], a[0].data[lo:hi], a[1].data[lo:hi]) })
	return out
}

func (c *context) Rows(x compute.Tensor, start, n int) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	t := a[0]
	if start < 0 || n < 0 || start+n > t.rows {
		return c.fail("Rows %d..%d of a tensor of %d rows", start, start+n, t.rows)
	}
	return c.view(n, t.cols, t.data[start*t.cols:(start+n)*t.cols], t.buf)
}

func (c *context) Float32s(x compute.Tensor) ([]float32, error) {
	a, ok := c.args(x)
	if !ok {
		return nil, c.err
	}
	if len(a[0].data) == 0 {
		return nil, nil
	}
	// From the pool: the caller may give it back with Backend.Recycle.
	out := c.b.alloc(len(a[0].data))
	copy(out, a[0].data)
	return out, nil
}

// ropeTable caches cos and sin per position for one RoPE, grown on demand.
type ropeTable struct {
	n        int // positions covered
	cos, sin []float32
}

func (b *Backend) ropeTable(r *compute.RoPE, n int) *ropeTable {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.ropes[r]
	if t != nil && t.n >= n {
		return t
	}
	// Grow geometrically; a new table replaces the old one so readers never race.
	size := max(n, 2*tableLen(t), 256)
	half := r.Dims / 2
	nt := &ropeTable{n: size, cos: make([]float32, size*half), sin: make([]float32, size*half)}
	for p := 0; p < size; p++ {
		for i := 0; i < half; i++ {
			nt.cos[p*half+i], nt.sin[p*half+i] = r.CosSin(p, i)
		}
	}
	b.ropes[r] = nt
	return nt
}

func tableLen(t *ropeTable) int {
	if t == nil {
		return 0
	}
	return t.n
}
