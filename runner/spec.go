package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/model"
)

// Speculative decoding by prompt lookup. After each token, the longest recent n-gram of
// the prompt and output so far that ends the text and occurred before proposes what
// followed it then; the drafted tokens and the token before them go through the model in
// one pass (Model.ForwardRows, whose rows compute what one-token steps compute), and the
// generation loop takes the tokens one by one from those rows as it would from decode
// steps (constraint mask, sampling, stop strings, logprobs), keeping each draft while the
// sampler agrees with it (Sampler.SampleDraft: at temperature 0 the same tokens as plain
// decoding, sampling the same distribution). The caches are then cut back to what was
// kept. Decoding is bound by reading the weights, which a pass of a few rows reads once,
// so every kept draft is a token for almost nothing.
//
// The draft length adapts: it doubles (up to num_draft) while drafts are kept whole,
// shrinks to what was kept after a rejection, and after drafts that keep nothing drafting
// pauses for a number of tokens that doubles each time; with no match there is no draft
// and the step is a plain one, so free writing costs nearly nothing. Drafting also pauses
// (the same growing pause) while a verification pass costs more per token it yields than a
// plain step does, both timed as they run: where a pass of several rows costs nearly one
// step (a GPU, or a CPU bound by memory bandwidth) drafts pay from a low acceptance on,
// where each row costs nearly a step (a CPU short of cores) only from a high one.

// Lookup n-gram sizes: the longest match is tried first. One token matches too often by
// chance in free text to be worth a pass.
const (
	lookupMaxN = 4
	lookupMinN = 2
	maxPause   = 64
)

// DefaultNumDraft is num_draft when neither the request, the model nor the server sets
// it: the most tokens prompt lookup drafts a step.
const DefaultNumDraft = 8

// MaxNumDraft bounds num_draft: a verification pass of more rows costs more than the
// tokens it could keep save.
const MaxNumDraft = 64

type ngram struct {
	n int8
	t [lookupMaxN]int32
}

// lookup drafts by prompt lookup and adapts its length.
type lookup struct {
	hist    []int32
	idx     map[ngram]int // n-gram → the latest end (exclusive) of an occurrence
	indexed int           // n-grams ending at or before this position are in idx
	max     int           // num_draft
	k       int           // current draft length
	pause   int           // steps left without drafting
	backoff int           // the next pause
	zeros   int           // drafts in a row that kept nothing

	// Timings, as moving averages: a plain step, and a verification pass per token it
	// yields (the kept drafts and the token after them); passes since the last plain step.
	stepSec, passSec float64
	sinceStep        int
	untimed          bool // drafts regardless of the timings (tests that need drafts)

	drafted, accepted, passes int
}

func newLookup(prompt []int32, numDraft int) *lookup {
	h := make([]int32, len(prompt), len(prompt)+256)
	copy(h, prompt)
	return &lookup{hist: h, idx: map[ngram]int{}, max: numDraft, k: numDraft, backoff: 1, untimed: untimedDrafts}
}

// untimedDrafts makes every lookup draft whatever the timings say (tests of exactness,
// which need drafts on a machine however busy).
var untimedDrafts = false

// push appends a generated token to the history.
func (l *lookup) push(id int32) { l.hist = append(l.hist, id) }

func key(t []int32) ngram {
	g := ngram{n: int8(len(t))}
	copy(g.t[:], t)
	return g
}

// draft proposes up to limit tokens to follow the history; nil when nothing matches or
// drafting pauses.
func (l *lookup) draft(limit int) []int32 {
	return l.lookup(l.allow(limit))
}

// allow is the most tokens a draft may have now, at most limit: 0 while drafting pauses.
func (l *lookup) allow(limit int) int {
	if l.pause > 0 {
		l.pause--
		return 0
	}
	limit = min(limit, l.k)
	if limit <= 0 {
		return 0
	}
	if !l.untimed {
		if l.stepSec == 0 && l.sinceStep >= 2 || l.sinceStep >= refreshSteps {
			return 0 // a plain step now and then, to time one
		}
		if l.stepSec > 0 && l.passSec > l.stepSec {
			l.passSec = 0 // judged again after the pause
			l.pauseMore()
			return 0
		}
	}
	return limit
}

// lookup is prompt lookup's draft of up to limit tokens: nil when nothing matches.
func (l *lookup) lookup(limit int) []int32 {
	if limit <= 0 {
		return nil
	}
	L := len(l.hist)
	// Index the n-grams ending before the last position: the text's own suffix must not
	// match itself.
	for end := max(l.indexed+1, lookupMinN); end < L; end++ {
		for n := lookupMinN; n <= lookupMaxN && n <= end; n++ {
			l.idx[key(l.hist[end-n:end])] = end
		}
		l.indexed = end
	}
	for n := min(lookupMaxN, L-1); n >= lookupMinN; n-- {
		end, ok := l.idx[key(l.hist[L-n:])]
		if !ok {
			continue
		}
		d := l.hist[end:min(end+limit, L)]
		if len(d) > 0 {
			return d
		}
	}
	return nil
}

// refreshSteps is how many verification passes may run between two plain steps: the
// plain step's time is measured again at least this often.
const refreshSteps = 64

// ema is the weight of the newest timing in the moving averages.
const ema = 0.25

func average(avg, x float64) float64 {
	if avg == 0 {
		return x
	}
	return avg + ema*(x-avg)
}

// step records a plain decode step's time.
func (l *lookup) step(d time.Duration) {
	l.stepSec = average(l.stepSec, d.Seconds())
	l.sinceStep = 0
}

// pauseMore pauses drafting for the next pause length and doubles it.
func (l *lookup) pauseMore() {
	l.pause = l.backoff
	l.backoff = min(2*l.backoff, maxPause)
}

// record adapts the draft length to a verified draft of n tokens of which kept were kept,
// checked in d.
func (l *lookup) record(n, kept int, d time.Duration) {
	l.drafted += n
	l.accepted += kept
	l.passes++
	l.sinceStep++
	l.passSec = average(l.passSec, d.Seconds()/float64(kept+1))
	if kept > 0 && (l.stepSec == 0 || l.passSec <= l.stepSec) {
		l.backoff = 1 // drafting pays: the next pause starts short
	}
	switch {
	case kept == n:
		l.k = min(l.max, 2*l.k)
		l.zeros = 0
	case kept > 0:
		l.k = max(1, kept)
		l.zeros = 0
	default:
		l.k = max(1, l.k/2)
		if l.zeros++; l.zeros >= 2 {
			l.pauseMore()
		}
	}
}

// verifier runs verification passes over a sequence's caches and cuts them back,
// restoring the recurrent states of a hybrid model's linear-attention layers, which cannot
// be cut: each is checkpointed where the pass starts, restored there, and the kept tokens
// run through it again (a pass whose rows compute what steps do, so the state is the one
// step-by-step decoding reaches).
type verifier struct {
	m         *model.Model
	recurrent []*kvstore.Recurrent
	start     int  // caches' length before the pass
	had       bool // a checkpoint at start existed before the pass (the prefix cache's)
}

func newVerifier(m *model.Model, caches []kvstore.Layer) *verifier {
	v := &verifier{m: m}
	for _, c := range caches {
		if r, ok := c.(model.RecurrentLayer); ok {
			v.recurrent = append(v.recurrent, r.RecurrentState())
		}
	}
	return v
}

// pass runs tokens at the end of caches and returns every row's logits.
func (v *verifier) pass(ctx context.Context, tokens []int32, caches []kvstore.Layer) ([]float32, error) {
	v.start = caches[0].Len()
	if len(v.recurrent) > 0 {
		v.had = v.recurrent[0].HasCheckpoint(v.start)
		for _, r := range v.recurrent {
			r.Checkpoint()
		}
	}
	logits, err := v.m.ForwardRows(ctx, tokens, caches)
	if err != nil {
		v.drop()
	}
	return logits, err
}

// cut keeps the first n positions of caches after a pass; seq is what they hold up to n.
func (v *verifier) cut(ctx context.Context, caches []kvstore.Layer, n int, seq []int32) error {
	defer v.drop()
	if caches[0].Len() == n {
		return nil
	}
	if len(v.recurrent) == 0 {
		return truncate(caches, n)
	}
	if err := truncate(caches, v.start); err != nil {
		return err
	}
	if n == v.start {
		return nil
	}
	logits, err := v.m.ForwardRows(ctx, seq[v.start:n], caches)
	if err != nil {
		return fmt.Errorf("restoring the recurrent state after a rejected draft: %w", err)
	}
	v.m.Recycle(logits)
	return nil
}

// drop forgets the pass's checkpoint unless it was there before.
func (v *verifier) drop() {
	if v.had {
		return
	}
	for _, r := range v.recurrent {
		r.DropCheckpoint(v.start)
	}
}

func truncate(caches []kvstore.Layer, n int) error {
	for _, c := range caches {
		if c != nil && c.Len() > n {
			if err := c.Truncate(n); err != nil {
				return err
			}
		}
	}
	return nil
}
