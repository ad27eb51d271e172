// Package quality measures what a change to the engine (a KV-cache layout, 8-bit
// activations, quantized weights) costs in a model's answers: two sides are fed the
// same text teacher-forced, and their next-token distributions are compared at every
// position: full-vocabulary KL divergence of the reference from the test side, greedy
// top-1 agreement, and each side's perplexity on the text.
//
// It streams one chunk of positions at a time, so a long text never holds more than a
// chunk's logits per side.
package quality

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/model"
)

// HeldOut is English text that the trained test model (qwen3-tiny) never saw: two pages
// of the SQLite documentation (public domain), about 9,000 of its tokens. Its source is
// in testdata/README.md.
//
//go:embed testdata/heldout.txt
var HeldOut string

// Side is one of the two things compared: a model and the caches it runs with.
type Side struct {
	Name  string
	Model *model.Model
	// Caches makes the side's caches for one pass over the text. They are usually empty;
	// caches that come back already holding a prefix of the text (restored from a
	// prefix cache, say) are fed from their length on, and the positions before the
	// later of the two sides' starts are not scored.
	Caches func() ([]kvstore.Layer, error)
}

// Options tune Compare.
type Options struct {
	// Chunk is how many tokens one forward pass feeds (64 when 0). A chunk of 1 to 3
	// runs the decode path (the CPU backend's 8-bit inputs apply only there).
	Chunk int
	// Skip is how many first positions are not scored.
	Skip int
}

// Report is what Compare measured over the scored positions. Position i is scored on
// its logits, which predict token i+1 of the text.
type Report struct {
	Positions int // positions scored
	Top1Agree int // positions where both sides' most likely token is the same
	// Identical counts the positions whose logits are bitwise the same on both sides.
	Identical     int
	MeanKL, MaxKL float64 // KL(ref || test) in nats, over the whole vocabulary
	// PPLRef and PPLTest are each side's perplexity on the text's next tokens.
	PPLRef, PPLTest float64
}

// Top1 is the share of scored positions whose greedy tokens agree.
func (r Report) Top1() float64 {
	if r.Positions == 0 {
		return 0
	}
	return float64(r.Top1Agree) / float64(r.Positions)
}

func (r Report) String() string {
	return fmt.Sprintf("%d positions: top-1 agreement %.2f%% (%d), mean KL %.3g, max KL %.3g, perplexity %.3f (ref) %.3f (test), %d identical",
		r.Positions, 100*r.Top1(), r.Top1Agree, r.MeanKL, r.MaxKL, r.PPLRef, r.PPLTest, r.Identical)
}

// runner is one side during a Compare.
type runner struct {
	Side
	caches []kvstore.Layer
	pos    int // positions fed so far
}

func (s *runner) open() error {
	if s.Model == nil || s.Caches == nil {
		return fmt.Errorf("quality: side %q has no model or no caches", s.Name)
	}
	c, err := s.Caches()
	if err != nil {
		return fmt.Errorf("quality: side %q: %w", s.Name, err)
	}
	if len(c) == 0 {
		return fmt.Errorf("quality: side %q made no caches", s.Name)
	}
	s.caches = c
	if err := s.Model.PrepareCaches(c); err != nil {
		return fmt.Errorf("quality: side %q: %w", s.Name, err)
	}
	s.pos = c[0].Len()
	return nil
}

// advance feeds tokens[s.pos:end] in chunks without keeping their logits.
func (s *runner) advance(ctx context.Context, tokens []int32, end, chunk int) error {
	for s.pos < end {
		n := min(chunk, end-s.pos)
		l, err := s.Model.Forward(ctx, tokens[s.pos:s.pos+n], s.caches, false)
		if err != nil {
			return fmt.Errorf("quality: side %q at %d: %w", s.Name, s.pos, err)
		}
		s.Model.Recycle(l)
		s.pos += n
	}
	return nil
}

// Compare feeds both sides tokens teacher-forced, chunk by chunk, and compares their
// next-token distributions at positions Skip to len(tokens)-2 (the last token is only
// predicted, never fed).
func Compare(ctx context.Context, ref, test Side, tokens []int32, o Options) (Report, error) {
	if o.Chunk <= 0 {
		o.Chunk = 64
	}
	if o.Skip < 0 {
		return Report{}, fmt.Errorf("quality: negative Skip %d", o.Skip)
	}
	r, t := &runner{Side: ref}, &runner{Side: test}
	if err := r.open(); err != nil {
		return Report{}, err
	}
	if err := t.open(); err != nil {
		return Report{}, err
	}
	vocab := ref.Model.Config.VocabSize
	if v := test.Model.Config.VocabSize; v != vocab {
		return Report{}, fmt.Errorf("quality: %q has a vocabulary of %d, %q of %d", ref.Name, vocab, test.Name, v)
	}
	end := len(tokens) - 1 // positions fed: each predicts the next token
	start := max(o.Skip, r.pos, t.pos)
	if start >= end {
		return Report{}, fmt.Errorf("quality: nothing to score: %d tokens, scoring from position %d (skip %d, caches holding %d and %d)",
			len(tokens), start, o.Skip, r.pos, t.pos)
	}
	for _, s := range []*runner{r, t} {
		if err := s.advance(ctx, tokens, start, o.Chunk); err != nil {
			return Report{}, err
		}
	}
	var (
		rep           Report
		sumKL, nllRef float64
		nllTest       float64
		logits        [2][]float32
		sides         = [2]*runner{r, t}
	)
	pos := make([]scored, o.Chunk)
	scratch := make([][3][]float64, min(runtime.GOMAXPROCS(0), o.Chunk))
	for i := range scratch {
		scratch[i] = [3][]float64{make([]float64, vocab), make([]float64, vocab), make([]float64, vocab)}
	}
	for p := start; p < end; p += o.Chunk {
		n := min(o.Chunk, end-p)
		for i, s := range sides {
			l, err := s.Model.Forward(ctx, tokens[p:p+n], s.caches, true)
			if err != nil {
				return Report{}, fmt.Errorf("quality: side %q at %d: %w", s.Name, p, err)
			}
			if len(l) != n*vocab {
				return Report{}, fmt.Errorf("quality: side %q returned %d logits for %d positions of a vocabulary of %d", s.Name, len(l), n, vocab)
			}
			logits[i] = l
			s.pos += n
		}
		for j := range n {
			if next := tokens[p+j+1]; next < 0 || int(next) >= vocab {
				return Report{}, fmt.Errorf("quality: token %d (at %d) is outside the vocabulary of %d", next, p+j+1, vocab)
			}
		}
		scoreAll(pos[:n], scratch, logits, tokens[p+1:p+n+1], vocab)
		for _, ps := range pos[:n] { // in order, so that the sums do not depend on the workers
			sumKL += ps.kl
			rep.MaxKL = max(rep.MaxKL, ps.kl)
			if ps.agree {
				rep.Top1Agree++
			}
			if ps.identical {
				rep.Identical++
			}
			nllRef += ps.nllRef
			nllTest += ps.nllTest
			rep.Positions++
		}
		r.Model.Recycle(logits[0])
		t.Model.Recycle(logits[1])
	}
	np := float64(rep.Positions)
	rep.MeanKL = sumKL / np
	rep.PPLRef = math.Exp(nllRef / np)
	rep.PPLTest = math.Exp(nllTest / np)
	return rep, nil
}

// scored is one position's measures.
type scored struct {
	kl, nllRef, nllTest float64
	agree, identical    bool
}

// scoreAll scores the positions of one chunk, logits[0] and logits[1] holding their rows
// and next their next tokens, over as many goroutines as scratch has buffers.
func scoreAll(out []scored, scratch [][3][]float64, logits [2][]float32, next []int32, vocab int) {
	var wg sync.WaitGroup
	var at atomic.Int64
	for w := range min(len(scratch), len(out)) {
		wg.Go(func() {
			lr, lt, pr := scratch[w][0], scratch[w][1], scratch[w][2]
			for j := int(at.Add(1) - 1); j < len(out); j = int(at.Add(1) - 1) {
				a, b := logits[0][j*vocab:(j+1)*vocab], logits[1][j*vocab:(j+1)*vocab]
				ar, at := logSoftmax(lr, pr, a), logSoftmax(lt, nil, b)
				out[j] = scored{kl: klProbs(pr, lr, lt), nllRef: -lr[next[j]], nllTest: -lt[next[j]],
					agree: ar == at, identical: bitsEqual(a, b)}
			}
		})
	}
	wg.Wait()
}

// logSoftmax writes the log-probabilities of logits into out and, unless probs is nil,
// the probabilities into probs, in float64, and returns the index of the largest logit
// (the first on a tie).
func logSoftmax(out, probs []float64, logits []float32) int {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	m := float64(logits[best])
	var sum float64
	for i, v := range logits {
		e := math.Exp(float64(v) - m)
		if probs != nil {
			probs[i] = e
		}
		sum += e
	}
	log := math.Log(sum)
	for i, v := range logits {
		out[i] = float64(v) - m - log
	}
	for i := range probs {
		probs[i] /= sum
	}
	return best
}

// klProbs is the divergence Σ p·(log p − log q) in nats of two distributions given by
// their log-probabilities, p's probabilities given too.
func klProbs(p, logP, logQ []float64) float64 {
	var kl float64
	for i, lp := range logP {
		kl += p[i] * (lp - logQ[i])
	}
	return max(kl, 0)
}

func bitsEqual(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
