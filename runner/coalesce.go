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
// and never on a prompt over twice its length (whose prefill would outlast its own). Models
// whose caches cannot resume mid-prompt (sliding windows, recurrent states: they resume
// only where a prompt ended) do not wait.

type inflight struct {
	head []int32 // the prompt minus its last token: what its prefill saves
	done chan struct{}
}

// coalescer holds an engine's prompts being prefilled.
type coalescer struct {
	mu   sync.Mutex
	list []*inflight
}

// coalesce waits, when another request is prefilling a prompt that shares enough with
// prompt, for its blocks; then registers prompt's prefill. Call release when the prompt's
// blocks are saved (it may be called again).
func (e *Engine) coalesce(ctx context.Context, prompt []int32) (release func(), err error) {
	c := e.coal
	if c == nil || e.prefix == nil || len(prompt) < 2 {
		return func() {}, nil
	}
	if _, own := e.Model.Network().(model.CacheMaker); own {
		return func() {}, nil
	}
	head := prompt[:len(prompt)-1]
	c.mu.Lock()
	var lead *inflight
	for _, f := range c.list {
		n := commonPrefix(f.head, head)
		if n >= kvstore.BlockTokens && 2*n >= len(head) && len(f.head) <= 2*len(head) {
			lead = f
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
	me := &inflight{head: head, done: make(chan struct{})}
	c.mu.Lock()
	c.list = append(c.list, me)
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			if i := slices.Index(c.list, me); i >= 0 {
				c.list = slices.Delete(c.list, i, i+1)
			}
			c.mu.Unlock()
			close(me.done)
		})
	}, nil
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
