package runner

import (
	"context"
	"slices"
	"sync"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/model"
)

// Prefill coalescing. Requests that arrive together with the same new system prompt (an
// agent's sub-agents, parallel tool calls) would each compute it: the prefix cache shares
// a prompt's blocks once its prefill has saved them, not while it runs. So a batching
// engine with a prefix cache lets a request whose prompt shares at least a block, and at
// least half of itself, with a prompt being prefilled wait for that prefill to end; it then
// restores the shared blocks by reference and prefills only the rest. It waits at most once,
// only when the prompt being prefilled computes at least a block of what they share (not
// when it restored that from the cache itself: a registered prompt that has not restored
// yet is first waited for until it has, so that a burst of requests whose shared blocks are
// all cached does not wait on each other), and never on a prompt over twice its length
// (whose prefill would outlast its own). Models
// whose caches cannot resume mid-prompt (sliding windows, recurrent states: they resume
// only where a prompt ended) do not wait; nor do models split over several machines
// (runner/pipeline), since coalescing across ranks is untested.

type inflight struct {
	head  []int32       // the prompt minus its last token: what its prefill saves
	from  int           // where its computation starts: the tokens it restored (c.mu); -1 until known
	known chan struct{} // closed once from is known (or the prefill ended without restoring)
	done  chan struct{}
	once  sync.Once // closes known
}

func (f *inflight) settle() { f.once.Do(func() { close(f.known) }) }

// coalescer holds an engine's prompts being prefilled.
type coalescer struct {
	mu    sync.Mutex
	list  []*inflight
	waits int // requests that waited so far (tests)
}

// prefillTicket is a request's registration: restored records how many of its tokens its
// prefill restored from the cache, release ends it (both may be called on nil, release
// more than once).
type prefillTicket struct {
	c    *coalescer
	me   *inflight
	once sync.Once
}

func (t *prefillTicket) restored(n int) {
	if t == nil {
		return
	}
	t.c.mu.Lock()
	t.me.from = n
	t.c.mu.Unlock()
	t.me.settle()
}

func (t *prefillTicket) release() {
	if t == nil {
		return
	}
	t.once.Do(func() {
		c := t.c
		c.mu.Lock()
		if i := slices.Index(c.list, t.me); i >= 0 {
			c.list = slices.Delete(c.list, i, i+1)
		}
		c.mu.Unlock()
		t.me.settle()
		close(t.me.done)
	})
}

// coalesce waits, when another request is prefilling a prompt that shares enough with
// prompt, for its blocks; then registers prompt's prefill. Release the ticket when the
// prompt's blocks are saved. A nil ticket (nothing to coalesce) is valid.
func (e *Engine) coalesce(ctx context.Context, prompt []int32) (*prefillTicket, error) {
	c := e.coal
	if c == nil || e.prefix == nil || len(prompt) < 2 {
		return nil, nil
	}
	if _, own := e.Model.Network().(model.CacheMaker); own || e.Model.Executor() != nil {
		return nil, nil
	}
	head := prompt[:len(prompt)-1]
	for {
		lead, pending := c.find(head)
		if pending != nil { // how much it computes is not known until it has restored
			select {
			case <-pending.known:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if lead != nil {
			select {
			case <-lead.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		break
	}
	t := &prefillTicket{c: c, me: &inflight{head: head, from: -1, known: make(chan struct{}), done: make(chan struct{})}}
	c.mu.Lock()
	c.list = append(c.list, t.me)
	c.mu.Unlock()
	return t, nil
}

// find returns the prefill head should wait for (lead), or one sharing enough with head
// whose restore is not known yet (pending), or neither.
func (c *coalescer) find(head []int32) (lead, pending *inflight) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.list {
		n := commonPrefix(f.head, head)
		if 2*n < len(head) || len(f.head) > 2*len(head) || n < kvstore.BlockTokens {
			continue
		}
		if f.from < 0 {
			return nil, f
		}
		if n-f.from >= kvstore.BlockTokens {
			c.waits++
			return f, nil
		}
	}
	return nil, nil
}

func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
