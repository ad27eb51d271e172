package runner

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/mlxg/mlxg/runner/model"
)

// Continuous batching. Each request keeps its own generation loop (Engine.run: sampling,
// stop strings, format constraints, logprobs, cancellation, the prefix cache), but its
// forward passes go through the engine's batcher, which runs the next pass of every
// running sequence as one batched pass (model.ForwardBatch): the weights are read once
// per step for all of them. A step starts once every running sequence has asked for its
// next pass, or gatherWait after the first asked (a sequence busy elsewhere joins the
// next step). A newcomer is admitted at a step boundary while fewer than the batcher's
// cap are running, else it waits; its prompt goes through in the engine's usual chunks,
// at most prefillBudget prompt rows per step beside the decode rows, so that one long
// prompt delays the running streams by a chunk per step instead of stalling them.

const (
	gatherWait    = 5 * time.Millisecond
	prefillBudget = 512
)

// batcher runs an engine's concurrent forward passes together.
type batcher struct {
	m   *model.Model
	cap int // sequences running at once

	mu      sync.Mutex
	running int
	admit   []chan struct{} // sequences waiting for a slot, first come first served
	pending []*stepReq
	kick    chan struct{} // a request arrived or a sequence left
	looping bool
	stats   BatchStats
}

// BatchStats describes an engine's running batch (ps, /metrics).
type BatchStats struct {
	Cap      int   // most sequences run at once
	Running  int   // sequences admitted now
	Waiting  int   // sequences waiting for a slot
	Steps    int64 // batched steps run so far
	Rows     int64 // rows (tokens) of every step so far
	Seqs     int64 // sequence-steps so far (Seqs/Steps: the mean batch)
	LastSeqs int   // sequences in the latest step
}

type stepReq struct {
	ctx  context.Context
	seq  model.Sequence
	done chan model.Result
}

func newBatcher(m *model.Model, cap int) *batcher {
	return &batcher{m: m, cap: cap, kick: make(chan struct{}, 1)}
}

// Stats returns the batch's state.
func (b *batcher) Stats() BatchStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.Cap, s.Running, s.Waiting = b.cap, b.running, len(b.admit)
	return s
}

func (b *batcher) signal() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// join admits a sequence, waiting for a slot while cap sequences run; the caller calls
// the returned leave once its last pass is done.
func (b *batcher) join(ctx context.Context) (leave func(), err error) {
	b.mu.Lock()
	if b.running < b.cap && len(b.admit) == 0 {
		b.running++
		b.mu.Unlock()
		return b.leave, nil
	}
	ch := make(chan struct{})
	b.admit = append(b.admit, ch)
	b.mu.Unlock()
	select {
	case <-ch:
		return b.leave, nil
	case <-ctx.Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		if i := slices.Index(b.admit, ch); i >= 0 {
			b.admit = slices.Delete(b.admit, i, i+1)
			return nil, ctx.Err()
		}
		// Admitted meanwhile: give the slot on.
		b.leaveLocked()
		return nil, ctx.Err()
	}
}

// alone reports whether at most one sequence runs: a sequence may then run passes of its
// own (speculative decoding's verification) without taking a step from the others.
func (b *batcher) alone() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.running <= 1 && len(b.admit) == 0
}

func (b *batcher) leave() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.leaveLocked()
}

func (b *batcher) leaveLocked() {
	b.running--
	if len(b.admit) > 0 && b.running < b.cap {
		close(b.admit[0])
		b.admit = b.admit[1:]
		b.running++
	}
	b.signal()
}

// forward runs tokens through caches in the next step and returns the last position's
// logits. On cancellation the caches are left as they were.
func (b *batcher) forward(ctx context.Context, seq model.Sequence) ([]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &stepReq{ctx: ctx, seq: seq, done: make(chan model.Result, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, r)
	if !b.looping {
		b.looping = true
		go b.loop()
	}
	b.signal()
	b.mu.Unlock()
	select {
	case res := <-r.done:
		return res.Logits, res.Err
	case <-ctx.Done():
		b.mu.Lock()
		if i := slices.Index(b.pending, r); i >= 0 {
			b.pending = slices.Delete(b.pending, i, i+1)
			b.mu.Unlock()
			return nil, ctx.Err()
		}
		b.mu.Unlock()
		res := <-r.done // in a step now: its caches are being written
		return res.Logits, res.Err
	}
}

// loop runs steps while sequences are running or passes are pending.
func (b *batcher) loop() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		b.mu.Lock()
		for len(b.pending) == 0 {
			if b.running == 0 {
				b.looping = false
				b.mu.Unlock()
				return
			}
			b.mu.Unlock()
			<-b.kick
			b.mu.Lock()
		}
		// Gather: wait a moment for the running sequences still sampling their last token.
		if len(b.pending) < b.running {
			timer.Reset(gatherWait)
			for waiting := true; waiting && len(b.pending) < b.running; {
				b.mu.Unlock()
				select {
				case <-b.kick:
				case <-timer.C:
					waiting = false
				}
				b.mu.Lock()
			}
			timer.Stop()
		}
		take := b.pick()
		b.mu.Unlock()
		if len(take) > 0 {
			b.step(take)
		}
	}
}

// pick takes the step's passes off pending (b.mu held): every decode pass and prompt
// chunks, first come first served, up to prefillBudget rows (at least one chunk).
func (b *batcher) pick() []*stepReq {
	var take, rest []*stepReq
	prompt := 0
	for _, r := range b.pending {
		n := len(r.seq.Tokens)
		switch {
		case n == 1:
			take = append(take, r)
		case prompt == 0 || prompt+n <= prefillBudget:
			prompt += n
			take = append(take, r)
		default:
			rest = append(rest, r)
		}
	}
	b.pending = rest
	return take
}

// step runs one batched pass and hands each sequence its logits.
func (b *batcher) step(take []*stepReq) {
	live := take[:0]
	for _, r := range take {
		if err := r.ctx.Err(); err != nil {
			r.done <- model.Result{Err: err}
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	seqs := make([]model.Sequence, len(live))
	starts := make([]int, len(live))
	rows := 0
	for i, r := range live {
		seqs[i] = r.seq
		if len(seqs[i].Caches) > 0 && seqs[i].Caches[0] != nil {
			starts[i] = seqs[i].Caches[0].Len()
		}
		rows += len(seqs[i].Tokens)
	}
	ctx := context.Background()
	if len(live) == 1 {
		ctx = live[0].ctx // alone, a pass stops mid-way when its client goes
	}
	res := b.m.ForwardBatch(ctx, seqs)
	b.mu.Lock()
	b.stats.Steps++
	b.stats.Rows += int64(rows)
	b.stats.Seqs += int64(len(live))
	b.stats.LastSeqs = len(live)
	b.mu.Unlock()
	for i, r := range live {
		if err := r.ctx.Err(); err != nil && res[i].Err == nil {
			for _, l := range seqs[i].Caches {
				if l.Len() > starts[i] {
					l.Truncate(starts[i])
				}
			}
			res[i] = model.Result{Err: err}
		}
		r.done <- res[i]
	}
}
