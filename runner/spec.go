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
// The draft length adapts: it starts short (two tokens), doubles (up to num_draft) while
// drafts are kept whole, and shrinks to what was kept after a rejection; after drafts that
// keep nothing drafting pauses for a number of tokens that doubles each time, and until a
// draft has been kept (again) only a match of three tokens or more drafts, since two-token
// matches are common by chance in free text. With no match there is no draft and the step
// is a plain one.
//
// Drafting must also not cost where it does not pay, and what a pass costs against a step
// depends on the machine: where decoding is bound by memory bandwidth (a GPU, a CPU with
// many cores) a pass of several rows costs little more than one step, where each row costs
// nearly a step (a CPU short of cores, weights that stay in cache) only passes that keep
// nearly everything pay. So the loop keeps a ledger of the time drafting saved: each pass
// adds what its tokens would have cost as plain steps (both timed as they run) minus what
// it cost; while the ledger is in debt nothing is drafted, and each plain step pays back a
// small share of a step (probeShare). A pass that loses time therefore buys a pause as long
// as the loss over that share, and the time lost to passes that do not pay stays within
// that share of the decoding time, wherever passes fall between free and dear. A draft kept
// whole but shorter than num_draft puts the ledger into no debt (the next, longer one is
// judged instead: a short pass bears its fixed cost over fewer tokens). Time saved
// is banked up to a few steps only, so that a run of good drafts does not excuse a long
// run of bad ones.

// Lookup n-gram sizes: the longest match is tried first. One token matches too often by
// chance in free text to be worth a pass, and two tokens do too until drafts have been kept.
const (
	lookupMaxN = 4
	lookupMinN = 2
	coldMinN   = 3
	startDraft = 2 // the first draft length, at most num_draft
	maxPause   = 64
)

// The ledger: plain steps pay back probeShare of a step each while it is in debt; it
// banks at most bankSteps steps of saved time.
const (
	probeShare = 1.0 / 32
	bankSteps  = 16
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
	warm    bool          // the last draft kept tokens: two-token matches draft too

	// A plain step's time (a moving average), the ledger (seconds saved by drafting; below
	// zero, lost and not yet paid back), and the passes since the last plain step.
	stepSec, ledger float64
	sinceStep       int
	untimed         bool // drafts regardless of the timings (tests that need drafts)

	drafted, accepted, passes int
}

func newLookup(prompt []int32, numDraft int) *lookup {
	h := make([]int32, len(prompt), len(prompt)+256)
	copy(h, prompt)
	return &lookup{hist: h, idx: map[ngram]int{}, max: numDraft, k: min(numDraft, startDraft), backoff: 1, untimed: untimedDrafts}
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
	if !l.untimed && (l.stepSec == 0 || l.sinceStep >= refreshSteps || l.ledger < 0) {
		// A plain step first and now and then, to time one; and none while drafting has
		// lost time it has not paid back.
		return 0
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
	lo := coldMinN
	if l.warm {
		lo = lookupMinN
	}
	for n := min(lookupMaxN, L-1); n >= lo; n-- {
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

// ema is the weight of the newest timing in the step's moving average.
const ema = 0.25

// step records a plain decode step's time; a ledger in debt is paid back a little.
func (l *lookup) step(d time.Duration) {
	if l.stepSec == 0 {
		l.stepSec = d.Seconds()
	} else {
		l.stepSec += ema * (d.Seconds() - l.stepSec)
	}
	l.sinceStep = 0
	if l.ledger < 0 {
		l.ledger = min(0, l.ledger+probeShare*l.stepSec)
	}
}

// pauseMore pauses drafting for the next pause length and doubles it.
func (l *lookup) pauseMore() {
	l.pause = l.backoff
	l.backoff = min(2*l.backoff, maxPause)
}

// record adapts the draft length to a verified draft of n tokens of which kept were kept,
// and the ledger to the pass's cost d (drafting and verifying, not the sampling that every
// token costs either way).
func (l *lookup) record(n, kept int, d time.Duration) {
	l.drafted += n
	l.accepted += kept
	l.passes++
	l.sinceStep++
	if l.stepSec > 0 {
		before := l.ledger
		l.ledger = min(l.ledger+float64(kept+1)*l.stepSec-d.Seconds(), bankSteps*l.stepSec)
		if kept == n && n < l.max && l.ledger < 0 {
			// A draft kept whole but short of num_draft: the next one is longer and
			// spreads the pass's fixed cost over more tokens; judge that one.
			l.ledger = min(before, 0)
		}
	}
	switch {
	case kept == n:
		l.k = min(l.max, 2*l.k)
	case kept > 0:
		l.k = kept
	default:
		l.k = max(1, l.k/2)
		l.warm = false
		if l.zeros++; l.zeros >= 2 {
			l.pauseMore()
		}
		return
	}
	l.warm, l.zeros, l.backoff = true, 0, 1
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
