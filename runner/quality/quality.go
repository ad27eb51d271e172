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
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/model"
)

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
	// Chunk is how many tokens one forward pass feeds at most (64 when 0); the scored
	// chunks end at multiples of it. A chunk of 1 to 3 runs the decode path (the CPU
	// backend's 8-bit inputs apply only there).
	Chunk int
	// Skip is how many first positions are not scored.
	Skip int
	// ClearGap is the gap between the reference's two largest logits at or above which
	// a position's answer counts as clear (Report.Clear; DefaultClearGap when 0). Below
	// it, rounding noise may swap a near-tie that no layout could be expected to keep.
	ClearGap float64
	// Progress, when set, is called after each chunk with the number of positions fed
	// so far and the reports of the positions scored so far, one per test side. A
	// causal model's logits at a position do not depend on what follows, so the
	// report at fed = L is exactly what a text of L+1 tokens would give: one pass over
	// a long text measures every shorter context too (at chunk boundaries).
	Progress func(fed int, reports []Report)
}

// DefaultClearGap is Options.ClearGap's default, in logits.
const DefaultClearGap = 0.1

// Report is what Compare measured over the scored positions. Position i is scored on
// its logits, which predict token i+1 of the text.
type Report struct {
	Positions int // positions scored
	Top1Agree int // positions where both sides' most likely token is the same
	// Clear counts the positions whose reference logits have a clear answer: their
	// largest exceeds the second by at least Options.ClearGap. ClearAgree counts those
	// where the test side's most likely token is the reference's.
	Clear, ClearAgree int
	// Identical counts the positions whose logits are bitwise the same on both sides.
	Identical     int
	MeanKL, MaxKL float64 // KL(ref || test) in nats, over the whole vocabulary
	// PPLRef and PPLTest are each side's perplexity on the text's next tokens.
	PPLRef, PPLTest float64
}

// Top1Clear is the share of the clear positions whose greedy tokens agree (1 when
// there are none).
func (r Report) Top1Clear() float64 {
	if r.Clear == 0 {
		return 1
	}
	return float64(r.ClearAgree) / float64(r.Clear)
}

// Top1 is the share of scored positions whose greedy tokens agree.
func (r Report) Top1() float64 {
	if r.Positions == 0 {
		return 0
	}
	return float64(r.Top1Agree) / float64(r.Positions)
}

func (r Report) String() string {
	return fmt.Sprintf("%d positions: top-1 agreement %.2f%% (%d), where the gap is clear %.2f%% (%d of %d), mean KL %.3g, max KL %.3g, perplexity %.3f (ref) %.3f (test), %d identical",
		r.Positions, 100*r.Top1(), r.Top1Agree, 100*r.Top1Clear(), r.ClearAgree, r.Clear, r.MeanKL, r.MaxKL, r.PPLRef, r.PPLTest, r.Identical)
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
	r, err := CompareAll(ctx, ref, []Side{test}, tokens, o)
	if err != nil {
		return Report{}, err
	}
	return r[0], nil
}

// CompareAll is Compare of ref with each of tests, the reference run once for all: the
// sides advance together, one chunk at a time.
func CompareAll(ctx context.Context, ref Side, tests []Side, tokens []int32, o Options) ([]Report, error) {
	if o.Chunk <= 0 {
		o.Chunk = 64
	}
	if o.ClearGap == 0 {
		o.ClearGap = DefaultClearGap
	}
	if o.Skip < 0 {
		return nil, fmt.Errorf("quality: negative Skip %d", o.Skip)
	}
	if len(tests) == 0 {
		return nil, fmt.Errorf("quality: no side to compare with %q", ref.Name)
	}
	sides := []*runner{{Side: ref}}
	for _, t := range tests {
		sides = append(sides, &runner{Side: t})
	}
	start := o.Skip
	for _, s := range sides {
		if err := s.open(); err != nil {
			return nil, err
		}
		start = max(start, s.pos)
	}
	vocab := ref.Model.Config.VocabSize
	for _, t := range tests {
		if v := t.Model.Config.VocabSize; v != vocab {
			return nil, fmt.Errorf("quality: %q has a vocabulary of %d, %q of %d", ref.Name, vocab, t.Name, v)
		}
	}
	end := len(tokens) - 1 // positions fed: each predicts the next token
	if start >= end {
		return nil, fmt.Errorf("quality: nothing to score: %d tokens, scoring from position %d (skip %d, caches holding %d)",
			len(tokens), start, o.Skip, sides[0].pos)
	}
	for _, s := range sides {
		if err := s.advance(ctx, tokens, start, o.Chunk); err != nil {
			return nil, err
		}
	}
	acc := make([]sums, len(tests))
	logits := make([][]float32, len(sides))
	pos := make([][]scored, len(tests))
	for k := range pos {
		pos[k] = make([]scored, o.Chunk)
	}
	scratch := make([][3][]float64, min(runtime.GOMAXPROCS(0), o.Chunk))
	for i := range scratch {
		scratch[i] = [3][]float64{make([]float64, vocab), make([]float64, vocab), make([]float64, vocab)}
	}
	for p := start; p < end; {
		n := min(o.Chunk-p%o.Chunk, end-p) // chunks end at multiples of Chunk
		for j := range n {
			if next := tokens[p+j+1]; next < 0 || int(next) >= vocab {
				return nil, fmt.Errorf("quality: token %d (at %d) is outside the vocabulary of %d", next, p+j+1, vocab)
			}
		}
		for i, s := range sides {
			l, err := s.Model.Forward(ctx, tokens[p:p+n], s.caches, true)
			if err != nil {
				return nil, fmt.Errorf("quality: side %q at %d: %w", s.Name, p, err)
			}
			if len(l) != n*vocab {
				return nil, fmt.Errorf("quality: side %q returned %d logits for %d positions of a vocabulary of %d", s.Name, len(l), n, vocab)
			}
			logits[i] = l
			s.pos += n
		}
		scoreAll(pos, n, scratch, logits, tokens[p+1:p+n+1], vocab, o.ClearGap)
		for k := range tests {
			for _, ps := range pos[k][:n] { // in order, so that the sums do not depend on the workers
				acc[k].add(ps)
			}
		}
		for i, s := range sides {
			s.Model.Recycle(logits[i])
		}
		if o.Progress != nil {
			out := make([]Report, len(acc))
			for k := range acc {
				out[k] = acc[k].report()
			}
			o.Progress(p+n, out)
		}
		p += n
	}
	out := make([]Report, len(acc))
	for k := range acc {
		out[k] = acc[k].report()
	}
	return out, nil
}

// sums accumulate one test side's measures.
type sums struct {
	r                   Report
	kl, nllRef, nllTest float64
}

func (s *sums) add(ps scored) {
	s.kl += ps.kl
	s.r.MaxKL = max(s.r.MaxKL, ps.kl)
	if ps.agree {
		s.r.Top1Agree++
	}
	if ps.identical {
		s.r.Identical++
	}
	if ps.clear {
		s.r.Clear++
		if ps.agree {
			s.r.ClearAgree++
		}
	}
	s.nllRef += ps.nllRef
	s.nllTest += ps.nllTest
	s.r.Positions++
}

func (s *sums) report() Report {
	r, n := s.r, float64(s.r.Positions)
	r.MeanKL, r.PPLRef, r.PPLTest = s.kl/n, math.Exp(s.nllRef/n), math.Exp(s.nllTest/n)
	return r
}

// scored is one position's measures.
type scored struct {
	kl, nllRef, nllTest float64
	agree, identical    bool
	clear               bool // the reference's top-2 gap is at least the clear gap
}

// scoreAll scores the first n positions of one chunk for every test side k into
// out[k], logits[0] holding the reference's rows, logits[1+k] side k's, and next the
// positions' next tokens, over as many goroutines as scratch has buffers; a position
// is clear when the reference's top-2 logit gap is at least gap.
func scoreAll(out [][]scored, n int, scratch [][3][]float64, logits [][]float32, next []int32, vocab int, gap float64) {
	var wg sync.WaitGroup
	var at atomic.Int64
	for w := range min(len(scratch), n) {
		wg.Go(func() {
			lr, lt, pr := scratch[w][0], scratch[w][1], scratch[w][2]
			for j := int(at.Add(1) - 1); j < n; j = int(at.Add(1) - 1) {
				a := logits[0][j*vocab : (j+1)*vocab]
				ar := logSoftmax(lr, pr, a)
				sure := top2Gap(a, ar) >= gap
				for k := range out {
					b := logits[1+k][j*vocab : (j+1)*vocab]
					at := logSoftmax(lt, nil, b)
					out[k][j] = scored{kl: klProbs(pr, lr, lt), nllRef: -lr[next[j]], nllTest: -lt[next[j]],
						agree: ar == at, identical: bitsEqual(a, b), clear: sure}
				}
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

// top2Gap is how far logits' largest, at best, exceeds the next largest.
func top2Gap(logits []float32, best int) float64 {
	second := math.Inf(-1)
	for i, v := range logits {
		if i != best {
			second = max(second, float64(v))
		}
	}
	return float64(logits[best]) - second
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
