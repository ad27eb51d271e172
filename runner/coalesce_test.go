package runner

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// TestCoalescedPrefill sends requests that share a new 600-token prefix while the first
// one prefills it: they wait for its blocks, restore them (512 tokens, two blocks) instead
// of computing them, and answer exactly as alone; a second wave, whose shared blocks are
// cached, does not wait.
func TestCoalescedPrefill(t *testing.T) {
	dir := testdata.SharedModel(t, "qwen3-tiny")
	pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: t.TempDir(), Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	e, err := Load(dir, LoadOptions{Threads: 2, Logger: quietLog(), Parallel: 4, Prefix: pc})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	alone, err := Load(dir, LoadOptions{Threads: 2, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	shared := modeltest.Tokens(77, 600)
	prompts := make([][]int32, 4)
	for i := range prompts {
		prompts[i] = append(slices.Clone(shared), modeltest.Tokens(uint64(100+i), 20)...)
	}
	o := Greedy()
	o.NumPredict, o.NumBatch, o.NumCtx = 8, 128, 1024
	gen := func(e *Engine, p []int32) *Result {
		res, err := e.GenerateTokens(context.Background(), p, o, func(int32) (bool, error) { return false, nil })
		if err != nil {
			t.Error(err)
		}
		return res
	}
	// wave sends prompts, the first alone until it has registered its prefill, and
	// checks each against alone and the tokens each restored.
	wave := func(prompts [][]int32, cached func(i int) int, restoredFirst bool) {
		results := make([]*Result, len(prompts))
		var wg sync.WaitGroup
		wg.Go(func() { results[0] = gen(e, prompts[0]) })
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) { // the first one is prefilling
			e.coal.mu.Lock()
			n := len(e.coal.list)
			ready := n == 1 && (!restoredFirst || e.coal.list[0].from > 0)
			e.coal.mu.Unlock()
			if ready {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the first request never registered its prefill")
			}
		}
		for i := 1; i < len(prompts); i++ {
			wg.Go(func() { results[i] = gen(e, prompts[i]) })
		}
		wg.Wait()
		for i, r := range results {
			if r == nil {
				t.Fatalf("request %d failed", i)
			}
			want := gen(alone, prompts[i])
			if !slices.Equal(r.Tokens, want.Tokens) {
				t.Errorf("request %d: %v, alone %v", i, r.Tokens, want.Tokens)
			}
			got := 0
			if r.Prefix != nil {
				got = r.Prefix.Cached
			}
			if got != cached(i) {
				t.Errorf("request %d restored %d tokens, want %d", i, got, cached(i))
			}
		}
		if len(e.coal.list) != 0 {
			t.Errorf("%d prefills still registered", len(e.coal.list))
		}
	}
	wave(prompts, func(i int) int { return map[bool]int{true: 0, false: 512}[i == 0] }, false)
	if e.coal.waits != 3 {
		t.Errorf("%d requests waited, want 3", e.coal.waits)
	}
	// Now the shared blocks are cached: a new wave restores them without waiting.
	for i := range prompts {
		prompts[i] = append(slices.Clone(shared), modeltest.Tokens(uint64(200+i), 20)...)
	}
	wave(prompts, func(int) int { return 512 }, true) // followers start once the first has restored
	if e.coal.waits != 3 {
		t.Errorf("%d requests waited, want still 3: the shared blocks were cached", e.coal.waits)
	}
}

// TestCoalesceRule: a request waits on a prefill that computes at least a block of what
// they share, waits first to learn how much one that has not restored yet computes, and
// does not wait on one that restored the shared blocks from the cache.
func TestCoalesceRule(t *testing.T) {
	shared := modeltest.Tokens(7, 600)
	head := append(slices.Clone(shared), modeltest.Tokens(8, 20)...)
	other := append(slices.Clone(shared), modeltest.Tokens(9, 20)...)
	for _, tc := range []struct {
		from          int
		lead, pending bool
	}{{-1, false, true}, {0, true, false}, {256, true, false}, {512, false, false}} {
		c := &coalescer{list: []*inflight{{head: other, from: tc.from}}}
		lead, pending := c.find(head)
		if (lead != nil) != tc.lead || (pending != nil) != tc.pending {
			t.Errorf("from %d: lead %v pending %v, want %v %v", tc.from, lead != nil, pending != nil, tc.lead, tc.pending)
		}
	}
	// Nothing shared beyond a block's worth, or a prompt over twice as long: no wait at all.
	c := &coalescer{list: []*inflight{{head: modeltest.Tokens(10, 620), from: -1}, {head: append(slices.Clone(head), modeltest.Tokens(11, 1300)...), from: 0}}}
	if lead, pending := c.find(head); lead != nil || pending != nil {
		t.Errorf("unrelated or much longer prompts: lead %v pending %v", lead, pending)
	}
}
