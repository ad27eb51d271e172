package runner

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/text/template"
)

// batchRequests are distinct greedy chat requests, with stop strings, a JSON format and
// logprobs among them.
func batchRequests(t *testing.T) []Request {
	questions := []string{
		"Say hello.", "What is two plus two?", "Name a color.", "Write a haiku about rain.",
		"Tell me a short joke about computers.", "List three fruits.", "Describe a person as JSON.",
	}
	var reqs []Request
	for i, q := range questions {
		o := Greedy()
		o.NumPredict, o.NumCtx, o.NumBatch = 24+4*i, 1024, 16
		r := Request{Messages: []template.Message{{"role": "system", "content": "You are a helpful assistant. Answer briefly."}, {"role": "user", "content": q}},
			TemplateKwargs: map[string]any{"enable_thinking": false}, Options: o}
		switch i {
		case 1:
			r.Options.Stop = []string{"four", "4"}
		case 3:
			r.Logprobs, r.TopLogprobs = true, 3
		case 6:
			r.Format = &Format{Schema: mustSchema(t, `"json"`)}
		}
		reqs = append(reqs, r)
	}
	return reqs
}

// TestContinuousBatchQwen3Tiny runs distinct greedy requests on the trained Qwen3 model
// concurrently through an engine that batches up to 4 (the rest wait for a slot), and
// each alone on an engine that does not: the text, tokens, stop reason and logprobs are
// identical, and the steps did batch several sequences.
func TestContinuousBatchQwen3Tiny(t *testing.T) {
	dir := testdata.SharedModel(t, "qwen3-tiny")
	alone, err := Load(dir, LoadOptions{Threads: 2, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	batched, err := Load(dir, LoadOptions{Threads: 2, Logger: quietLog(), Parallel: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer batched.Close()
	if batched.batch == nil {
		t.Fatal("Parallel 4 made no batcher")
	}
	reqs := batchRequests(t)
	want := make([]*Result, len(reqs))
	for i, r := range reqs {
		if want[i], err = alone.Generate(context.Background(), r, nil); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]*Result, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			var err error
			if got[i], err = batched.Generate(context.Background(), r, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i := range reqs {
		g, w := got[i], want[i]
		if g == nil {
			continue
		}
		if g.Text != w.Text || !slices.Equal(g.Tokens, w.Tokens) || g.DoneReason != w.DoneReason || g.StopSequence != w.StopSequence {
			t.Errorf("request %d: batched %q (%s), alone %q (%s)", i, g.Text, g.DoneReason, w.Text, w.DoneReason)
		}
		if !reflect.DeepEqual(g.Logprobs, w.Logprobs) {
			t.Errorf("request %d: logprobs differ batched and alone", i)
		}
	}
	st, _ := batched.BatchStats()
	if st.Steps == 0 || float64(st.Seqs)/float64(st.Steps) < 1.5 {
		t.Errorf("the steps did not batch: %+v", st)
	}
	if st.Running != 0 || st.Waiting != 0 {
		t.Errorf("after the requests: %+v", st)
	}
	t.Logf("%d steps, %.2f sequences and %.1f rows per step", st.Steps, float64(st.Seqs)/float64(st.Steps), float64(st.Rows)/float64(st.Steps))
}

// TestContinuousBatchCancel cancels requests of a running batch (waiting for a slot, in
// prefill, mid-stream, and from the callback): the others finish as they would alone, and
// the batcher's goroutine ends once nothing runs.
func TestContinuousBatchCancel(t *testing.T) {
	dir := testdata.SharedModel(t, "qwen3-tiny")
	e, err := Load(dir, LoadOptions{Threads: 2, Logger: quietLog(), Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	before := runtime.NumGoroutine()
	reqs := batchRequests(t)[:5]
	want := make([]*Result, len(reqs))
	for i, r := range reqs {
		if want[i], err = e.Generate(context.Background(), r, nil); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(reqs))
	got := make([]*Result, len(reqs))
	for i, r := range reqs {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var fn func(string) error
		switch i {
		case 1: // mid-stream, through the context
			n := 0
			fn = func(string) error {
				if n++; n == 3 {
					cancel()
				}
				return nil
			}
		case 2: // the client's writer fails
			fn = func(string) error { return errors.New("client went away") }
		case 4: // waiting for a slot or in its prefill
			time.AfterFunc(time.Millisecond, cancel)
		}
		wg.Go(func() { got[i], errs[i] = e.Generate(ctx, r, fn) })
	}
	wg.Wait()
	for _, i := range []int{0, 3} {
		if errs[i] != nil || got[i].Text != want[i].Text {
			t.Errorf("request %d beside cancelled ones: %v, %q; alone %q", i, errs[i], got[i].Text, want[i].Text)
		}
	}
	if !errors.Is(errs[1], context.Canceled) || errs[2] == nil || !strings.Contains(errs[2].Error(), "went away") {
		t.Errorf("cancelled requests returned %v and %v", errs[1], errs[2])
	}
	if errs[4] != nil && !errors.Is(errs[4], context.Canceled) {
		t.Errorf("request cancelled early: %v", errs[4])
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines before the batch, %d after", before, n)
	}
	if st, _ := e.BatchStats(); st.Running != 0 || st.Waiting != 0 {
		t.Errorf("after the requests: %+v", st)
	}
}
