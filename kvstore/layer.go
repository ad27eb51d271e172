package kvstore

import (
	"fmt"

	"github.com/mlxg/mlxg/internal/half"
	"github.com/mlxg/mlxg/internal/quant"
)

// BlockTokens is the page size of every layer cache: positions are stored in blocks of
// this many tokens, the unit of prefix sharing and of the RAM and SSD tiers.
const BlockTokens = 256

// Layer is the KV cache of one attention layer for one sequence. The compute backend
// appends each step's keys and values (already RoPE'd) and then asks the layer to attend:
// every kind (fp16, quantized, sliding window) runs attention over its own storage, so a
// quantized kind dequantizes inside its loop and never materialises a full-size copy.
// A Layer is used by one goroutine at a time; Attend may fan out internally.
type Layer interface {
	// Dims returns the KV heads and the per-head sizes of keys and values.
	Dims() (kvHeads, kHeadDim, vHeadDim int)
	// Len is the number of positions stored (the next position to append).
	Len() int
	// Append stores n new positions: k is n×kvHeads×kHeadDim and v n×kvHeads×vHeadDim
	// float32 values, row-major by position, then head.
	Append(k, v []float32, n int) error
	// Attend computes causal grouped-query attention for the last a.N positions appended.
	Attend(a Attention) error
	// Truncate keeps the first n positions and drops the rest.
	Truncate(n int) error
	// Bytes is the memory the stored positions occupy.
	Bytes() int64
}

// Attention is one call to Layer.Attend: softmax(scale·q·kᵀ)·v over the cached positions,
// query row i (absolute position Len()-N+i) seeing positions 0..Len()-N+i.
type Attention struct {
	Q       []float32 // N×Heads×kHeadDim queries
	Out     []float32 // N×Heads×vHeadDim, overwritten
	N       int       // query rows: the last N positions in the cache
	Heads   int       // query heads, a multiple of the KV heads (grouped-query attention)
	Scale   float32   // usually 1/sqrt(kHeadDim)
	Threads int       // goroutines Attend may use; values below 1 mean 1
	// Sinks, when set, holds one learned logit per query head (gpt-oss's attention
	// sinks): each head's softmax runs over its scores and that logit, whose share of
	// the probability is dropped, so the head's output is the plain attention scaled by
	// Σe^s / (Σe^s + e^sink). Every kind applies it where it normalises (state.write).
	Sinks []float32
	// QV, when set, makes the call multi-head latent attention (latent.go): N×Heads×
	// vHeadDim queries against the values, each score being scale·(q·k + qv·v).
	QV []float32
	// Bidirectional, when set, lists spans of absolute positions whose rows attend to each
	// other in both directions (Gemma 3's image tokens): a query row inside one sees what
	// its causal (and sliding-window) mask shows and every position of its span, the later
	// ones included (spans.go). Spans are in order and apart, and each ends within the
	// cache's positions: the span's later rows are appended in this call or before it.
	Bidirectional []Span
}

// Span is the positions [Start, End).
type Span struct{ Start, End int }

// Full is the unquantized full-attention cache kind: it grows by blocks of BlockTokens
// positions, stored as fp16 (what MLX keeps) or, for exact references, float32.
type Full struct {
	kvHeads, kDim, vDim int
	fp32                bool
	n                   int
	k16, v16            [][]uint16 // blocks of BlockTokens×kvHeads×dim, when !fp32
	k32, v32            [][]float32
	shared              int // leading blocks handed to the prefix cache by reference: copied before a write
	window              int // NewFullWindow: each query sees its last window positions; 0: all
	rowMode
}

// NewFullWindow is NewFull for a sliding-window layer whose positions are all kept
// (exact float32 references, where kvstore.Rotating would round to fp16): each query
// row attends over the last window positions up to its own, as a Rotating cache does.
func NewFullWindow(kvHeads, kHeadDim, vHeadDim int, fp32 bool, window int) (*Full, error) {
	if window <= 0 {
		return nil, fmt.Errorf("kvstore: a sliding-window cache needs a positive window, got %d", window)
	}
	c, err := NewFull(kvHeads, kHeadDim, vHeadDim, fp32)
	if err != nil {
		return nil, err
	}
	c.window = window
	return c, nil
}

// Window is the number of positions each query sees, 0 for all (NewFull).
func (c *Full) Window() int { return c.window }

// NewFull makes an empty full-attention cache, fp16 unless fp32 is set.
func NewFull(kvHeads, kHeadDim, vHeadDim int, fp32 bool) (*Full, error) {
	if kvHeads <= 0 || kHeadDim <= 0 || vHeadDim <= 0 {
		return nil, fmt.Errorf("kvstore: a layer cache needs positive KV heads and head dims, got %d heads, %d and %d", kvHeads, kHeadDim, vHeadDim)
	}
	return &Full{kvHeads: kvHeads, kDim: kHeadDim, vDim: vHeadDim, fp32: fp32}, nil
}

// Dims implements Layer.
func (c *Full) Dims() (int, int, int) { return c.kvHeads, c.kDim, c.vDim }

// Len implements Layer.
func (c *Full) Len() int { return c.n }

// Bytes implements Layer: the positions stored, at 2 or 4 bytes per element.
func (c *Full) Bytes() int64 {
	size := int64(2)
	if c.fp32 {
		size = 4
	}
	return int64(c.n) * int64(c.kvHeads*(c.kDim+c.vDim)) * size
}

// Append implements Layer.
func (c *Full) Append(k, v []float32, n int) error {
	kw, vw := c.kvHeads*c.kDim, c.kvHeads*c.vDim
	if n < 0 || len(k) != n*kw || len(v) != n*vw {
		return fmt.Errorf("kvstore: Append of %d positions needs %d key and %d value floats, got %d and %d", n, n*kw, n*vw, len(k), len(v))
	}
	for i := 0; i < n; i++ {
		b, off := c.n/BlockTokens, c.n%BlockTokens
		if b == c.blocks() {
			if c.fp32 {
				c.k32 = append(c.k32, blockSlice[float32](BlockTokens*kw))
				c.v32 = append(c.v32, blockSlice[float32](BlockTokens*vw))
			} else {
				c.k16 = append(c.k16, blockSlice[uint16](BlockTokens*kw))
				c.v16 = append(c.v16, blockSlice[uint16](BlockTokens*vw))
			}
		}
		kr, vr := k[i*kw:(i+1)*kw], v[i*vw:(i+1)*vw]
		if c.fp32 {
			copy(c.k32[b][off*kw:], kr)
			copy(c.v32[b][off*vw:], vr)
		} else {
			for j, x := range kr {
				c.k16[b][off*kw+j] = half.F32ToF16(x)
			}
			for j, x := range vr {
				c.v16[b][off*vw+j] = half.F32ToF16(x)
			}
		}
		c.n++
	}
	return nil
}

// Truncate implements Layer. Blocks past the new end are released.
func (c *Full) Truncate(n int) error {
	if n < 0 || n > c.n {
		return fmt.Errorf("kvstore: cannot truncate a cache of %d positions to %d", c.n, n)
	}
	privatize(&c.shared, n, c.unshare)
	keep := (n + BlockTokens - 1) / BlockTokens
	if c.fp32 {
		c.k32, c.v32 = c.k32[:keep], c.v32[:keep]
	} else {
		c.k16, c.v16 = c.k16[:keep], c.v16[:keep]
	}
	c.n = n
	return nil
}

// Attend implements Layer.
func (c *Full) Attend(a Attention) error {
	if a.QV != nil {
		if c.window > 0 || a.Bidirectional != nil {
			return fmt.Errorf("kvstore: latent attention over a sliding window or with bidirectional spans is not supported")
		}
		return attendLatent(c, c.n, a)
	}
	if a.Bidirectional != nil {
		return attendSpans(a, c.n, c.window, c.attendPrefix, func(b Attention, lo, hi int) error {
			if lo == 0 {
				return attendTiles(c, hi, b)
			}
			return attendTiles(fullWindow{c, lo}, hi-lo, b)
		})
	}
	return c.attendPrefix(a, c.n)
}

// attendPrefix is causal attention for a's rows as the last a.N of the first n positions.
func (c *Full) attendPrefix(a Attention, n int) error {
	if c.window > 0 {
		return c.attendWindow(a, n)
	}
	if c.exactRows && a.N > 1 {
		return attendRows(c, n, a)
	}
	return attendTiles(c, n, a)
}

func (c *Full) blocks() int {
	if c.fp32 {
		return len(c.k32)
	}
	return len(c.k16)
}

// tile implements tiler: widen head's keys and values at positions [from, to) of one block.
func (c *Full) tile(k, v []float32, head, from, to int) {
	b := from / BlockTokens
	kw, vw := c.kvHeads*c.kDim, c.kvHeads*c.vDim
	for p := from; p < to; p++ {
		off, r := p%BlockTokens, p-from
		ko, vo := off*kw+head*c.kDim, off*vw+head*c.vDim
		kd, vd := k[r*c.kDim:(r+1)*c.kDim], v[r*c.vDim:(r+1)*c.vDim]
		if c.fp32 {
			copy(kd, c.k32[b][ko:ko+c.kDim])
			copy(vd, c.v32[b][vo:vo+c.vDim])
			continue
		}
		quant.WidenF16(kd, c.k16[b][ko:ko+c.kDim])
		quant.WidenF16(vd, c.v16[b][vo:vo+c.vDim])
	}
}

// attendWindow is Attend for NewFullWindow over the first n positions: the rows whose
// window starts at position 0 attend together (one by one in exact-row mode), each later
// row alone over a view of its own window.
func (c *Full) attendWindow(a Attention, n int) error {
	if a.N <= 0 || a.N > n || n > c.n {
		return fmt.Errorf("kvstore: Attend for %d query rows over %d of a cache's %d positions", a.N, n, c.n)
	}
	qw, ow := a.Heads*c.kDim, a.Heads*c.vDim
	if len(a.Q) != a.N*qw || len(a.Out) != a.N*ow {
		return fmt.Errorf("kvstore: Attend needs %d query and %d output floats for %d rows of %d heads, got %d and %d",
			a.N*qw, a.N*ow, a.N, a.Heads, len(a.Q), len(a.Out))
	}
	first := n - a.N
	head := min(a.N, max(0, c.window-first))
	if head > 0 {
		b := a
		b.N, b.Q, b.Out = head, a.Q[:head*qw], a.Out[:head*ow]
		attend := attendTiles
		if c.exactRows {
			attend = attendRows
		}
		if err := attend(c, first+head, b); err != nil {
			return err
		}
	}
	for i := head; i < a.N; i++ {
		b := a
		b.N, b.Q, b.Out = 1, a.Q[i*qw:(i+1)*qw], a.Out[i*ow:(i+1)*ow]
		if err := attendTiles(fullWindow{c, first + i - (c.window - 1)}, c.window, b); err != nil {
			return err
		}
	}
	return nil
}

// fullWindow presents a Full cache's positions base, base+1, ... as 0, 1, ... to
// attendTiles, splitting each tile where the cache's blocks end.
type fullWindow struct {
	c    *Full
	base int
}

func (w fullWindow) Dims() (int, int, int) { return w.c.Dims() }

func (w fullWindow) tile(k, v []float32, head, from, to int) {
	for p := from; p < to; {
		abs := w.base + p
		end := min(to, p+BlockTokens-abs%BlockTokens)
		w.c.tile(k[(p-from)*w.c.kDim:], v[(p-from)*w.c.vDim:], head, abs, w.base+end)
		p = end
	}
}
