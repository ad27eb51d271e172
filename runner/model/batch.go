package model

import (
	"context"
	"fmt"
	"slices"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
)

// Sequence is one sequence's part of a batched forward pass: its new tokens, and its
// per-layer caches, which hold its positions so far and receive the new ones.
type Sequence struct {
	Tokens []int32
	Caches []kvstore.Layer
	// Out, when it can hold the logits, receives them (Result.Logits is then Out resliced)
	// and the pass hands its own logits buffer back to the backend's pool: a batched
	// decode step then allocates no vocabulary-sized slices. Nil: the pass's own.
	Out []float32
}

// Batch is the sequences of one forward pass, their rows concatenated in order. Row-wise
// ops (embedding, products, norms, activations, experts) run once over all the rows, so
// the weights are read once for every sequence; what depends on a sequence's positions
// (RoPE, attention over its cache, a recurrent state) runs per segment through Batch's
// helpers. A batch of one sequence calls the plain ops, exactly as an unbatched pass.
type Batch struct {
	Seqs []Sequence
	// LastOnly asks for each sequence's last row of logits instead of every row.
	LastOnly bool
	tokens   []int32
	start    []int // first row of each sequence, then the total
	offsets  []int // each sequence's caches' length before the pass
}

// NewBatch lays out seqs, whose caches are filled and in step (Model.ForwardBatch checks).
func NewBatch(seqs []Sequence, lastOnly bool) *Batch {
	b := &Batch{Seqs: seqs, LastOnly: lastOnly, start: make([]int, len(seqs)+1), offsets: make([]int, len(seqs))}
	for i, s := range seqs {
		b.tokens = append(b.tokens, s.Tokens...)
		b.start[i+1] = b.start[i] + len(s.Tokens)
		b.offsets[i] = s.Caches[0].Len()
	}
	return b
}

// Single is the batch of one sequence, for a Network's unbatched Forward.
func Single(tokens []int32, caches []kvstore.Layer, lastOnly bool) *Batch {
	return NewBatch([]Sequence{{Tokens: tokens, Caches: caches}}, lastOnly)
}

// Tokens returns every row's token, sequence after sequence.
func (b *Batch) Tokens() []int32 { return b.tokens }

// Offset is the position of sequence s's first row.
func (b *Batch) Offset(s int) int { return b.offsets[s] }

// Len is the number of rows of sequence s.
func (b *Batch) Len(s int) int { return b.start[s+1] - b.start[s] }

// Cache is sequence s's cache of layer i.
func (b *Batch) Cache(s, i int) kvstore.Layer { return b.Seqs[s].Caches[i] }

// Rows is sequence s's rows of x, a tensor of the whole batch (x itself for one sequence).
func (b *Batch) Rows(c compute.Context, x compute.Tensor, s int) compute.Tensor {
	if len(b.Seqs) == 1 {
		return x
	}
	return c.Rows(x, b.start[s], b.Len(s))
}

// Each runs fn once per sequence and joins the tensors it returns, row-wise.
func (b *Batch) Each(c compute.Context, fn func(s int) compute.Tensor) compute.Tensor {
	if len(b.Seqs) == 1 {
		return fn(0)
	}
	bc, ok := compute.Ext[compute.BatchContext](c)
	if !ok {
		return compute.Unsupported(c, "batched passes")
	}
	parts := make([]compute.Tensor, len(b.Seqs))
	for s := range b.Seqs {
		parts[s] = fn(s)
	}
	return bc.ConcatRows(parts...)
}

// RoPE rotates each sequence's rows of x at its own positions.
func (b *Batch) RoPE(c compute.Context, x compute.Tensor, r *compute.RoPE, headDim int) compute.Tensor {
	return b.Each(c, func(s int) compute.Tensor { return c.RoPE(b.Rows(c, x, s), r, headDim, b.offsets[s]) })
}

// Attention runs c.Attention for each sequence over its own cache of layer i.
func (b *Batch) Attention(c compute.Context, q, k, v compute.Tensor, i, heads int, scale float32) compute.Tensor {
	return b.Each(c, func(s int) compute.Tensor {
		return c.Attention(b.Rows(c, q, s), b.Rows(c, k, s), b.Rows(c, v, s), b.Cache(s, i), heads, scale)
	})
}

// AttentionSinks is Attention with learned sinks (compute.SinkAttentionContext), per
// sequence over its own cache of layer i.
func (b *Batch) AttentionSinks(c compute.Context, q, k, v compute.Tensor, i, heads int, scale float32, sinks compute.Vector) compute.Tensor {
	sc, ok := compute.Ext[compute.SinkAttentionContext](c)
	if !ok {
		return compute.Unsupported(c, "attention sinks")
	}
	return b.Each(c, func(s int) compute.Tensor {
		return sc.AttentionSinks(b.Rows(c, q, s), b.Rows(c, k, s), b.Rows(c, v, s), b.Cache(s, i), heads, scale, sinks)
	})
}

// AttentionShared runs attention for each sequence over its own cache of layer src,
// which this pass already appended to (compute.SharedKVContext): a layer that reads
// another layer's keys and values.
func (b *Batch) AttentionShared(c compute.Context, q compute.Tensor, src, heads int, scale float32) compute.Tensor {
	return b.attentionShared(c, q, src, heads, scale, false)
}

// ImageAttentionShared is AttentionShared under ImageAttention's mask: each sequence's
// image rows also see the later rows of their image in layer src's cache, as they do in
// src's own attention.
func (b *Batch) ImageAttentionShared(c compute.Context, q compute.Tensor, src, heads int, scale float32) compute.Tensor {
	return b.attentionShared(c, q, src, heads, scale, true)
}

func (b *Batch) attentionShared(c compute.Context, q compute.Tensor, src, heads int, scale float32, images bool) compute.Tensor {
	sc, ok := compute.Ext[compute.SharedKVContext](c)
	if !ok {
		return compute.Unsupported(c, "attention over another layer's KV")
	}
	return b.Each(c, func(s int) compute.Tensor {
		var spans []kvstore.Span
		if images {
			var err error
			if spans, err = b.ImageSpans(s); err != nil {
				return compute.Fail(c, err)
			}
		}
		return sc.AttentionShared(b.Rows(c, q, s), b.Cache(s, src), heads, scale, spans)
	})
}

// LatentAttention is multi-head latent attention (compute.LatentAttentionContext), per
// sequence over its own latent cache of layer i.
func (b *Batch) LatentAttention(c compute.Context, qRope, qLatent, kRope, latent compute.Tensor, i, heads int, scale float32) compute.Tensor {
	lc, ok := compute.Ext[compute.LatentAttentionContext](c)
	if !ok {
		return compute.Unsupported(c, "latent attention")
	}
	return b.Each(c, func(s int) compute.Tensor {
		return lc.LatentAttention(b.Rows(c, qRope, s), b.Rows(c, qLatent, s), b.Rows(c, kRope, s), b.Rows(c, latent, s), b.Cache(s, i), heads, scale)
	})
}

// CheckWindow reports an error when a sequence of b reaches past window positions
// while its cache of sliding-window layer i keeps more than the window (every position,
// or a longer ring) and so would attend over too many: a cache that keeps the window (or,
// under --max-kv-size, less) is made by kvstore.NewCaches (kvstore.Rotating) or the
// network's own NewCaches.
func (b *Batch) CheckWindow(i, window int) error {
	for s := range b.Seqs {
		if b.Offset(s)+b.Len(s) <= window {
			continue
		}
		if e, ok := b.Cache(s, i).(interface{ Elsewhere() bool }); ok && e.Elsewhere() {
			continue // a layer another process of a split model runs: nothing attends here
		}
		// A ring shorter than the window is --max-kv-size's choice (kvstore.NewCaches).
		if w, ok := b.Cache(s, i).(interface{ Window() int }); !ok || w.Window() <= 0 || w.Window() > window {
			return fmt.Errorf("layer %d is a sliding-window layer of %d positions, but its cache (%T) attends over every position: make its cache with kvstore.NewCaches or the model's NewCaches", i, window, b.Cache(s, i))
		}
	}
	return nil
}

// Last is what the output layer reads of the final hidden states h: with LastOnly each
// sequence's last row (one row per sequence, declared to the backend as segments of one
// row), else h.
func (b *Batch) Last(c compute.Context, h compute.Tensor) compute.Tensor {
	if !b.LastOnly {
		return h
	}
	if len(b.Seqs) == 1 {
		return c.Rows(h, len(b.tokens)-1, 1)
	}
	bc, ok := compute.Ext[compute.BatchContext](c)
	if !ok {
		return compute.Unsupported(c, "batched passes")
	}
	parts := make([]compute.Tensor, len(b.Seqs))
	ones := make([]int, len(b.Seqs))
	for s := range b.Seqs {
		parts[s] = c.Rows(h, b.start[s+1]-1, 1)
		ones[s] = 1
	}
	bc.Segments(ones)
	return bc.ConcatRows(parts...)
}

// BatchNetwork is a Network that runs several sequences in one pass. Its Forward is
// ForwardBatch of Single.
type BatchNetwork interface {
	Network
	// ForwardBatch returns the logits of b's rows (Batch.Last's rows).
	ForwardBatch(c compute.Context, b *Batch) compute.Tensor
}

// Batched reports whether ForwardBatch runs the model's sequences in one pass (else it
// runs them one after the other): the architecture and the backend both support it.
func (m *Model) Batched() bool {
	if m.exec != nil {
		return m.exec.Batched()
	}
	if _, ok := m.net.(BatchNetwork); !ok {
		return false
	}
	return compute.Supports[compute.BatchContext](m.backend, "batched passes") == nil
}

// Result is one sequence's outcome of ForwardBatch.
type Result struct {
	Logits []float32 // the last position's, vocab-sized
	Err    error
}

// ForwardBatch runs each sequence's tokens (at positions its caches' length onwards) and
// returns its last position's logits. Sequences are checked one by one: a bad one gets
// its error and the others still run. With ctx done the pass stops, and every
// sequence's caches are truncated back to where they were.
func (m *Model) ForwardBatch(ctx context.Context, seqs []Sequence) []Result {
	if m.exec != nil {
		return m.exec.ForwardBatch(ctx, seqs)
	}
	out := make([]Result, len(seqs))
	var run []int
	for i, s := range seqs {
		if out[i].Err = m.check(s.Tokens, s.Caches); out[i].Err == nil {
			run = append(run, i)
		}
	}
	bn, batched := m.net.(BatchNetwork)
	if len(run) < 2 || !batched {
		for _, i := range run {
			logits, err := m.Forward(ctx, seqs[i].Tokens, seqs[i].Caches, false)
			if err == nil && cap(seqs[i].Out) >= len(logits) {
				out[i].Logits = append(seqs[i].Out[:0], logits...)
				m.Recycle(logits)
				continue
			}
			out[i].Logits, out[i].Err = logits, err
		}
		return out
	}
	part := make([]Sequence, len(run))
	rows := make([]int, len(run))
	starts := make([]int, len(run))
	for j, i := range run {
		part[j] = seqs[i]
		rows[j] = len(seqs[i].Tokens)
		starts[j] = seqs[i].Caches[0].Len()
	}
	c := m.backend.NewContext()
	defer c.Close()
	bc, ok := compute.Ext[compute.BatchContext](c)
	if !ok {
		for _, i := range run {
			out[i].Logits, out[i].Err = m.Forward(ctx, seqs[i].Tokens, seqs[i].Caches, false)
		}
		return out
	}
	bc.Segments(rows)
	total := 0
	for _, r := range rows {
		total += r
	}
	defer m.pass(total)()
	logits, err := c.Float32s(bn.ForwardBatch(&cancellable{Context: c, ctx: ctx}, NewBatch(part, true)))
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	vocab := len(logits) / max(len(run), 1)
	if err == nil && (len(logits) != vocab*len(run) || vocab == 0) {
		err = fmt.Errorf("model: a batched pass of %d sequences returned %d logits", len(run), len(logits))
	}
	copied := err == nil
	for j, i := range run {
		if err != nil {
			for _, l := range seqs[i].Caches {
				if l.Len() > starts[j] {
					l.Truncate(starts[j])
				}
			}
			out[i].Err = err
			continue
		}
		part := logits[j*vocab : (j+1)*vocab : (j+1)*vocab]
		if cap(seqs[i].Out) < vocab {
			out[i].Logits, copied = part, false
			continue
		}
		out[i].Logits = append(seqs[i].Out[:0], part...)
	}
	if copied { // no sequence reads the pass's buffer
		m.Recycle(logits)
	}
	return out
}

// check validates one sequence's tokens and prepares its caches, as Forward does.
func (m *Model) check(tokens []int32, caches []kvstore.Layer) error {
	if len(tokens) == 0 {
		return fmt.Errorf("model: Forward with no tokens")
	}
	if len(caches) != m.Config.NumLayers {
		return fmt.Errorf("model: %d layer caches for a model of %d layers", len(caches), m.Config.NumLayers)
	}
	if err := m.PrepareCaches(caches); err != nil {
		return err
	}
	return checkIDs(tokens, caches, m.Config.VocabSize)
}

// Media is sequence s's media (SetMedia), nil when it has none.
func (b *Batch) Media(s int) *Media { return MediaOf(b.Seqs[s].Caches) }

// Embed is every row's input embedding: its token's row of w, or for a media id the
// feature row of the image span that sequence position holds (VisionContext.Input).
func (b *Batch) Embed(c compute.Context, w compute.Weight) compute.Tensor {
	return b.EmbedWith(c, w, nil)
}

// EmbedWith is Embed with f (when not nil) applied to the token rows' embeddings before
// the image rows join them (Gemma's scaled embeddings, which leave image features as they
// are).
func (b *Batch) EmbedWith(c compute.Context, w compute.Weight, f func(compute.Tensor) compute.Tensor) compute.Tensor {
	if f == nil {
		f = func(t compute.Tensor) compute.Tensor { return t }
	}
	first := -1
	for i, id := range b.tokens {
		if id >= MediaBase {
			first = i
			break
		}
	}
	stream := func(h compute.Tensor) compute.Tensor {
		if sc, ok := compute.Ext[compute.StreamContext](c); ok {
			return sc.Stream(h) // a pipeline's stage hands it between the ranks
		}
		return h
	}
	if first < 0 {
		return stream(f(c.Embed(w, b.tokens)))
	}
	vc, ok := compute.Ext[compute.VisionContext](c)
	if !ok {
		return compute.Unsupported(c, "image input")
	}
	bc, ok := compute.Ext[compute.BatchContext](c)
	if !ok {
		return compute.Unsupported(c, "image input")
	}
	ids := slices.Clone(b.tokens)
	for i, id := range ids {
		if id >= MediaBase {
			ids[i] = 0
		}
	}
	h := f(c.Embed(w, ids))
	_, hidden := h.Dims()
	var parts []compute.Tensor
	text := 0 // the first row not yet in parts
	for s := range b.Seqs {
		md := b.Media(s)
		if md != nil && md.Elsewhere {
			continue // a pipeline worker's: its stage computes no embeddings
		}
		for r := b.start[s]; r < b.start[s+1]; r++ {
			if b.tokens[r] < MediaBase {
				continue
			}
			span, k, ok := (*Span)(nil), 0, false
			if md != nil {
				span, k, ok = md.At(b.offsets[s] + r - b.start[s])
			}
			if !ok {
				return compute.Fail(c, fmt.Errorf("model: media token at position %d has no image features", b.offsets[s]+r-b.start[s]))
			}
			// The run of this span's rows from here on, in one Input (a backend that builds a
			// graph gets one array per image, not one per row).
			n := 1
			for r+n < b.start[s+1] && b.tokens[r+n] >= MediaBase && k+n < span.N() {
				n++
			}
			if len(span.Rows) < (k+n)*hidden {
				return compute.Fail(c, fmt.Errorf("model: media token at position %d has no image features", b.offsets[s]+r-b.start[s]))
			}
			if r > text {
				parts = append(parts, c.Rows(h, text, r-text))
			}
			parts = append(parts, vc.Input(span.Rows[k*hidden:(k+n)*hidden], n, hidden))
			text = r + n
			r += n - 1
		}
	}
	if text < len(b.tokens) {
		parts = append(parts, c.Rows(h, text, len(b.tokens)-text))
	}
	return stream(bc.ConcatRows(parts...))
}

// MRoPE rotates each sequence's rows of x as RoPE does, at the three-part positions of
// multimodal RoPE (m) for a sequence with media: its rows' own angles
// (VisionContext.RoPERows). A sequence without media has positions (i, i, i), which
// make plain RoPE's rotation.
func (b *Batch) MRoPE(c compute.Context, x compute.Tensor, r *compute.RoPE, m *compute.MRoPE, headDim int) compute.Tensor {
	return b.Each(c, func(s int) compute.Tensor {
		xs := b.Rows(c, x, s)
		md := b.Media(s)
		if md == nil || m == nil {
			return c.RoPE(xs, r, headDim, b.offsets[s])
		}
		vc, ok := compute.Ext[compute.VisionContext](c)
		if !ok {
			return compute.Unsupported(c, "image input")
		}
		n, half := b.Len(s), r.Dims/2
		cos, sin := make([]float32, n*half), make([]float32, n*half)
		for i := range n {
			r.RowAngles(m, md.Position(b.offsets[s]+i), cos[i*half:(i+1)*half], sin[i*half:(i+1)*half])
		}
		return vc.RoPERows(xs, vc.Input(cos, n, half), vc.Input(sin, n, half), headDim)
	})
}

// ImageAttention is Attention in which each sequence's image rows see every row of their
// image, the later ones included (compute.SpanAttentionContext: Gemma 3's bidirectional
// attention among an image's tokens); other rows see what their causal mask shows. A
// sequence whose pass holds no image row attends as Attention does.
func (b *Batch) ImageAttention(c compute.Context, q, k, v compute.Tensor, i, heads int, scale float32) compute.Tensor {
	return b.Each(c, func(s int) compute.Tensor {
		spans, err := b.ImageSpans(s)
		if err != nil {
			return compute.Fail(c, err)
		}
		if spans == nil {
			return c.Attention(b.Rows(c, q, s), b.Rows(c, k, s), b.Rows(c, v, s), b.Cache(s, i), heads, scale)
		}
		sc, ok := compute.Ext[compute.SpanAttentionContext](c)
		if !ok {
			return compute.Unsupported(c, "attention among an image's tokens")
		}
		return sc.AttentionSpans(b.Rows(c, q, s), b.Rows(c, k, s), b.Rows(c, v, s), b.Cache(s, i), heads, scale, spans)
	})
}

// ImageSpans are the positions of sequence s's images that have rows in this pass (nil
// when none has). An image whose rows this pass begins must end in it too: its rows attend
// to each other, so prefill never splits an image between passes (runner's chunkEnd).
func (b *Batch) ImageSpans(s int) ([]kvstore.Span, error) {
	md := b.Media(s)
	if md == nil {
		return nil, nil
	}
	lo, hi := b.offsets[s], b.offsets[s]+b.Len(s)
	var out []kvstore.Span
	for _, sp := range md.Spans {
		start, end := sp.Start, sp.Start+sp.N()
		if end <= lo || start >= hi {
			continue
		}
		if end > hi {
			return nil, fmt.Errorf("model: the image at positions %d to %d is split between passes (this one ends at %d): its rows attend to each other, so a pass must hold the rest of it", start, end, hi)
		}
		out = append(out, kvstore.Span{Start: start, End: end})
	}
	return out, nil
}
