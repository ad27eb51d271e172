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
// when it restored that from the cache itself), and never on a prompt over twice its length
// (whose prefill would outlast its own). Models
// whose caches cannot resume mid-prompt (sliding windows, recurrent states: they resume
// only where a prompt ended) do not wait.

type inflight struct {
	head []int32 // the prompt minus its last token: what its prefill saves
	from int     // where its computation starts: the tokens it restored (c.mu)
	done chan struct{}
}

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
	if _, own := e.Model.Network().(model.CacheMaker); own {
		return nil, nil
	}
	head := prompt[:len(prompt)-1]
	c.mu.Lock()
	var lead *inflight
	for _, f := range c.list {
		n := commonPrefix(f.head, head)
		if n-f.from >= kvstore.BlockTokens && 2*n >= len(head) && len(f.head) <= 2*len(head) {
			lead = f
			c.waits++
			break
		}
	}
	c.mu.Unlock()
	if lead != nil {
		select {
		case <-lead.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	t := &prefillTicket{c: c, me: &inflight{head: head, done: make(chan struct{})}}
	c.mu.Lock()
	c.list = append(c.list, t.me)
	c.mu.Unlock()
	return t, nil
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
