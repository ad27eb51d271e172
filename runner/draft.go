package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/sample"
)

// A draft model: a second, smaller model with the target's tokenizer drafts the next
// tokens one by one, each drawn from its sampler's distribution q, which verification
// hands to Sampler.SampleDraftFrom (keep with min(1, p/q), else draw from max(0, p−q)), so
// that the output is the target's as with prompt lookup. Its caches hold the text so far
// (prompt and output); after a verification they are cut back to the kept tokens.

// SetDraft makes d draft for e (nil: prompt lookup again). d must have e's tokenizer: the
// same vocabulary, the same ids for the same text, and the same end-of-sequence ids; a
// split model or a hybrid one (whose recurrent state cannot be cut back) cannot draft.
func (e *Engine) SetDraft(d *Engine) error {
	if d == nil {
		e.draft = nil
		return nil
	}
	if err := draftCompatible(e, d); err != nil {
		return err
	}
	e.draft = d
	return nil
}

// draftCompatible checks that d can draft for e.
func draftCompatible(e, d *Engine) error {
	if e.Tokenizer == nil || d.Tokenizer == nil {
		return errors.New("a draft model and its target need their tokenizers")
	}
	if !d.Model.Verifies() {
		return fmt.Errorf("the draft model %s is split over machines: it cannot draft", d.Dir)
	}
	caches, err := d.Model.NewCaches(false)
	if err != nil {
		return err
	}
	for i, c := range caches {
		if _, ok := c.(interface{ RecurrentState() *kvstore.Recurrent }); ok {
			return fmt.Errorf("the draft model %s has a recurrent layer (%d): its state cannot be cut back after a rejected draft; use a model of attention layers only", d.Dir, i)
		}
	}
	if tv, dv := e.Tokenizer.VocabSize(), d.Tokenizer.VocabSize(); tv != dv {
		return fmt.Errorf("the draft model %s has a vocabulary of %d tokens, the model it drafts for %d: a draft model needs the same tokenizer", d.Dir, dv, tv)
	}
	probe := "Draft models share tokenizers: 12 + 34 = 46, naïve café, 東京, <tool_call>{\"a\": [1]}</tool_call>\n\tdone."
	if a, b := e.Tokenizer.Encode(probe, true), d.Tokenizer.Encode(probe, true); !slices.Equal(a, b) {
		return fmt.Errorf("the draft model %s tokenizes text differently from the model it drafts for (%v against %v): a draft model needs the same tokenizer", d.Dir, b, a)
	}
	return nil
}

// draftModel is a draft model's state for one sequence.
type draftModel struct {
	e       *Engine
	caches  []kvstore.Layer
	sampler *sample.Sampler
	batch   int // prefill chunk
	logits  []float32
}

func newDraftModel(d *Engine, o Options, numCtx int) (*draftModel, error) {
	// The draft's own cache maker (its LoadOptions.KVCache): a served draft model gets its
	// caches from the KV policy, as its target does.
	caches, err := d.kv(d.Model, numCtx)
	if err != nil {
		return nil, err
	}
	so := o.sampling(numCtx)
	if so.Seed >= 0 {
		so.Seed ^= 0x5bd1e995 // its own random stream: its draws must not be the target's
	}
	s, err := sample.New(so)
	if err != nil {
		return nil, err
	}
	return &draftModel{e: d, caches: caches, sampler: s, batch: o.NumBatch}, nil
}

// propose drafts up to limit tokens to follow hist, and the distribution each was drawn
// from.
func (m *draftModel) propose(ctx context.Context, hist []int32, limit int) ([]int32, [][]sample.TokenProb, error) {
	if limit <= 0 {
		return nil, nil, nil
	}
	have := m.caches[0].Len()
	if have >= len(hist) { // cut back below hist by the caller; never ahead of it
		if err := truncate(m.caches, len(hist)-1); err != nil {
			return nil, nil, err
		}
		have = len(hist) - 1
	}
	m.sampler.Reset()
	m.sampler.Accept(hist...)
	var logits []float32
	for i := have; i < len(hist); i += m.batch {
		l, err := m.e.Model.Forward(ctx, hist[i:min(i+m.batch, len(hist))], m.caches, false)
		if err != nil {
			return nil, nil, err
		}
		m.recycle(l)
		logits = l
	}
	var draft []int32
	var qs [][]sample.TokenProb
	for {
		q, err := m.sampler.Distribution(logits)
		if err != nil {
			return nil, nil, err
		}
		tok := m.sampler.Draw(q)
		draft, qs = append(draft, tok), append(qs, q)
		if len(draft) == limit {
			return draft, qs, nil
		}
		m.sampler.Accept(tok)
		if logits, err = m.e.Model.Forward(ctx, []int32{tok}, m.caches, false); err != nil {
			return nil, nil, err
		}
		m.recycle(logits)
	}
}

// recycle hands the previous logits back to the backend's pool and keeps l.
func (m *draftModel) recycle(l []float32) {
	if m.logits != nil {
		m.e.Model.Recycle(m.logits)
	}
	m.logits = l
}

// cut keeps the first n positions of the draft's caches (those of the text kept).
func (m *draftModel) cut(n int) error {
	return truncate(m.caches, min(n, m.caches[0].Len()))
}
