package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/pipeline"
	"github.com/mlxg/mlxg/runner/pipeline/pipelinetest"
)

// faultBackend is a rank's CPU backend whose next pass fails (compute.Fail, as an op a
// backend lacks fails it) at the first op of an armed place: the embedding, a decoder
// layer's first product, or the head.
type faultBackend struct {
	compute.Backend
	mu    sync.Mutex
	place map[compute.Weight]string // "layer N", "head" or "embed_tokens"
	armed string
	fired string
}

var faultLayer = regexp.MustCompile(`(?:^|\.)layers\.(\d+)\.`)

func (b *faultBackend) Weight(src compute.Source, prefix string, q compute.Quant) (compute.Weight, error) {
	w, err := b.Backend.Weight(src, prefix, q)
	if err != nil {
		return w, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch m := faultLayer.FindStringSubmatch(prefix); {
	case m != nil:
		i, _ := strconv.Atoi(m[1])
		b.place[w] = fmt.Sprintf("layer %d", i)
	case strings.HasPrefix(prefix, "lm_head"):
		b.place[w] = "head"
	case strings.HasSuffix(prefix, "embed_tokens"):
		b.place[w] = "embed_tokens" // the embedding, and a tied head
	}
	return w, nil
}

func (b *faultBackend) arm(place string) {
	b.mu.Lock()
	b.armed, b.fired = place, ""
	b.mu.Unlock()
}

// fire reports whether an op on w fails, disarming the backend when it does: a Linear
// (the embeddings' is a tied head's) or, embed, an Embed.
func (b *faultBackend) fire(w compute.Weight, embed bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	place := b.place[w]
	if place == "embed_tokens" {
		place = "head"
		if embed {
			place = "embed"
		}
	}
	if b.armed == "" || place != b.armed {
		return nil
	}
	b.fired, b.armed = b.armed, ""
	return fmt.Errorf("injected failure at the %s", b.fired)
}

func (b *faultBackend) NewContext() compute.Context {
	return &faultContext{Context: b.Backend.NewContext(), b: b}
}

type faultContext struct {
	compute.Context
	b *faultBackend
}

func (c *faultContext) Unwrap() compute.Context       { return c.Context }
func (c *faultContext) Free(keep ...compute.Tensor)   { compute.Free(c.Context, keep...) }
func (c *faultContext) Fail(err error) compute.Tensor { return compute.Fail(c.Context, err) }

func (c *faultContext) Linear(x compute.Tensor, w compute.Weight) compute.Tensor {
	if err := c.b.fire(w, false); err != nil {
		return compute.Fail(c.Context, err)
	}
	return c.Context.Linear(x, w)
}

func (c *faultContext) Embed(w compute.Weight, ids []int32) compute.Tensor {
	if err := c.b.fire(w, true); err != nil {
		return compute.Fail(c.Context, err)
	}
	return c.Context.Embed(w, ids)
}

// TestPipelineRankFailsCPU makes each rank in turn fail its part of a pass (rank 0 at
// its embedding and in its layers, before it sends; each worker in each of its layers,
// after it received the stream; the last rank in its head) over three ranks, in a
// single pass and in a batched one: the request fails at once (not at the exchange's
// timeout) with the failing rank's own message, and the same passes run again give the
// unsplit model's logits bit for bit: no rank was left waiting, no transfer was left
// over on a link, and every rank's caches were rewound. The models: a dense one (5
// layers: ranks 0-1, 2-3, 4) and a Gemma 4 of the E2B kind (8 layers: 0-2, 3, 4-7; the
// transfers that a failing rank makes with zeros carry the per-layer inputs too).
func TestPipelineRankFailsCPU(t *testing.T) {
	for i, a := range pipeArchs() {
		if a.name != "qwen3" && a.name != "gemma4_e2b" {
			continue
		}
		t.Run(a.name, func(t *testing.T) { rankFails(t, random4Bit(t, a.cfg, uint64(21+i))) })
	}
}

func rankFails(t *testing.T, dir string) {
	const ranks = 3
	prompt := modeltest.Tokens(5, 12)
	ref, err := model.Load(dir, cpu.New(cpuThreads))
	if err != nil {
		t.Fatal(err)
	}
	want := greedyRun(t, ref, pipeCaches(t, ref, dir, "fp32"), prompt, 16, 2)
	wantBatch := batchRun(t, ref, 1)
	ref.Close()

	faults := make([]*faultBackend, ranks)
	p := pipelinetest.Start(t, pipelinetest.Config{Ranks: ranks, Backend: func(r int) compute.Backend {
		faults[r] = &faultBackend{Backend: cpu.New(cpuThreads), place: map[compute.Weight]string{}}
		return faults[r]
	}})
	// Far above a pass of this model, far below what the test allows a failed one.
	const timeout = 30 * time.Second
	p.Leader.Timeout, p.Net.Timeout = timeout, timeout
	m, err := p.Leader.Load(dir, p.Backends[0])
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	stages, err := pipeline.SplitModel(m.Config, ranks)
	if err != nil {
		t.Fatal(err)
	}
	type fault struct {
		rank  int
		place string
	}
	var cases []fault
	for _, s := range stages {
		if s.First() {
			cases = append(cases, fault{0, "embed"})
		}
		for i := s.Lo; i < s.Hi; i++ {
			cases = append(cases, fault{s.Rank, fmt.Sprintf("layer %d", i)})
		}
		if s.Last() {
			cases = append(cases, fault{s.Rank, "head"})
		}
	}
	// failed checks that err is the injected failure of f, reported within a few
	// seconds of began.
	failed := func(t *testing.T, f fault, err error, began time.Time) {
		t.Helper()
		if d := time.Since(began); d > 5*time.Second {
			t.Errorf("the failed pass took %v (the exchange's timeout is %v): a rank was left waiting", d, timeout)
		}
		if faults[f.rank].fired != f.place {
			t.Fatalf("the failure at rank %d's %s was not injected (fired: %q)", f.rank, f.place, faults[f.rank].fired)
		}
		msg := "injected failure at the " + f.place
		if err == nil || !strings.Contains(err.Error(), msg) || f.rank > 0 && !strings.Contains(err.Error(), fmt.Sprintf("rank %d", f.rank)) {
			t.Errorf("the pass failed with %v, want rank %d's %q", err, f.rank, msg)
		}
		if f.rank > 0 && !errors.Is(err, pipeline.ErrRankFailed) {
			t.Errorf("a worker's failure %v is not ErrRankFailed", err)
		}
		if b := p.Leader.Broken(); b != nil {
			t.Fatalf("the pipeline broke: %v", b)
		}
	}
	for _, f := range cases {
		t.Run(fmt.Sprintf("rank_%d/%s", f.rank, strings.ReplaceAll(f.place, " ", "_")), func(t *testing.T) {
			// A prefill whose first chunk fails, then the whole run again on the same
			// caches: the unsplit model's logits.
			caches := pipeCaches(t, m, dir, "fp32")
			faults[f.rank].arm(f.place)
			began := time.Now()
			_, err := m.Forward(context.Background(), prompt, caches, true)
			failed(t, f, err, began)
			if n := caches[0].Len(); n != 0 {
				t.Errorf("rank 0's caches hold %d positions after the failed pass, want 0", n)
			}
			got := greedyRun(t, m, caches, prompt, 16, 2)
			if d := bitDiffs(got.Logits, want.Logits); d > 0 {
				t.Errorf("after the failure: %d of %d logits differ from the unsplit model's", d, len(want.Logits))
			}
			// A batched pass that fails, then batched passes from the start.
			faults[f.rank].arm(f.place)
			var seqs []model.Sequence
			for i, n := range []int{20, 7, 13} {
				caches, err := m.NewCaches(false)
				if err != nil {
					t.Fatal(err)
				}
				seqs = append(seqs, model.Sequence{Tokens: modeltest.Tokens(uint64(30+i), n), Caches: caches})
			}
			began = time.Now()
			res := m.ForwardBatch(context.Background(), seqs)
			for _, r := range res {
				failed(t, f, r.Err, began)
			}
			if gotB := batchRun(t, m, 1); bitDiffs(gotB.Logits, wantBatch.Logits) > 0 {
				t.Errorf("after the failed batched pass: batched logits differ from the unsplit model's")
			}
		})
	}
}
