package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/pipeline"
)

const envDistFail = "MLXG_TEST_DIST_FAIL_MODEL"

// failRows is the prompt length whose pass rank r fails (failRows+r): each rank fails
// only the pass meant for it.
const failRows = 21

// faultyBackend is a rank's MLX backend whose contexts fail (as an op the backend lacks
// fails a pass, before it is evaluated) the first product of decoder layer layer in a
// pass of rows rows.
type faultyBackend struct {
	compute.Backend
	layer, rows int
	mu          sync.Mutex
	weights     map[compute.Weight]bool // layer's
}

var faultyLayer = regexp.MustCompile(`(?:^|\.)layers\.(\d+)\.`)

func (b *faultyBackend) Weight(src compute.Source, prefix string, q compute.Quant) (compute.Weight, error) {
	w, err := b.Backend.Weight(src, prefix, q)
	if m := faultyLayer.FindStringSubmatch(prefix); err == nil && m != nil {
		if i, _ := strconv.Atoi(m[1]); i == b.layer {
			b.mu.Lock()
			b.weights[w] = true
			b.mu.Unlock()
		}
	}
	return w, err
}

func (b *faultyBackend) NewContext() compute.Context {
	return &faultyContext{Context: b.Backend.NewContext(), b: b}
}

type faultyContext struct {
	compute.Context
	b *faultyBackend
}

func (c *faultyContext) Unwrap() compute.Context       { return c.Context }
func (c *faultyContext) Free(keep ...compute.Tensor)   { compute.Free(c.Context, keep...) }
func (c *faultyContext) Fail(err error) compute.Tensor { return compute.Fail(c.Context, err) }

func (c *faultyContext) Linear(x compute.Tensor, w compute.Weight) compute.Tensor {
	c.b.mu.Lock()
	hit := c.b.weights[w]
	c.b.mu.Unlock()
	if rows, _ := x.Dims(); hit && rows == c.b.rows {
		return compute.Fail(c.Context, fmt.Errorf("injected failure at layer %d", c.b.layer))
	}
	return c.Context.Linear(x, w)
}

// TestDistributedRankFails runs a 5-layer dense model over three ranks of MLX's ring
// (layers 0-1, 2-3, 4), each rank's backend failing the first product of one of its
// layers in the pass meant for it: rank 0 in layer 1, before it sends; rank 1 in layer
// 2 and rank 2 in layer 4, after they received. Each such request fails within seconds
// (the exchange's timeout is a minute) with the failing rank's own error, and after each
// a run on fresh caches gives one process's logits and tokens: no rank was left
// waiting, and the ring is usable.
func TestDistributedRankFails(t *testing.T) {
	cfg := randmodel.Tiny("qwen3", 512)
	cfg.NumLayers = 5
	prompt, steps := modeltest.Tokens(5, 12), 3
	faultLayer := []int{1, 2, 4}
	rank, isRank := mlxtest.Rank()
	if isRank {
		dir := os.Getenv(envDistFail)
		if dir == "" {
			t.Skip("not this test's ranks")
		}
		mb := mlxtest.Backend(t)
		g, err := mb.JoinGroup("ring")
		if err != nil {
			t.Fatal(err)
		}
		b := &faultyBackend{Backend: mb, layer: faultLayer[rank], rows: failRows + rank, weights: map[compute.Weight]bool{}}
		if rank != 0 {
			w := &pipeline.Worker{Wire: g, Open: func(dir string, s pipeline.Stage) (*model.Model, error) { return pipeline.LoadStage(dir, b, s) }}
			if err := w.Run(); err != nil {
				t.Fatal(err)
			}
			return
		}
		leader, err := pipeline.NewLeader(g)
		if err != nil {
			t.Fatal(err)
		}
		leader.Timeout = time.Minute
		m, err := leader.Load(dir, b)
		if err != nil {
			t.Fatal(err)
		}
		for r := range faultLayer {
			caches, err := m.NewCaches(true)
			if err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			_, err = m.Forward(context.Background(), modeltest.Tokens(uint64(40+r), failRows+r), caches, true)
			took := time.Since(began)
			want := fmt.Sprintf("injected failure at layer %d", faultLayer[r])
			if err == nil || !strings.Contains(err.Error(), want) || r > 0 && (!errors.Is(err, pipeline.ErrRankFailed) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", r))) {
				t.Errorf("rank %d failing: the request's error is %v, want rank %d's %q", r, err, r, want)
			}
			if took > 10*time.Second {
				t.Errorf("rank %d failing: the request took %v to fail", r, took)
			}
			if err := leader.Broken(); err != nil {
				t.Fatalf("rank %d failing broke the pipeline: %v", r, err)
			}
			t.Logf("rank %d failing: the request failed in %v: %v", r, took.Round(time.Millisecond), err)
			caches, err = m.NewCaches(true)
			if err != nil {
				t.Fatal(err)
			}
			mlxtest.Result(fmt.Sprintf("after%d", r), greedyRun(t, m, caches, prompt, steps))
		}
		m.Close()
		if err := leader.Stop(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)")
	}
	dir := random4Bit(t, "qwen3", cfg, 7)
	open := mlxtest.Opener(t)
	one, err := open()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := model.Load(dir, one)
	if err != nil {
		t.Fatal(err)
	}
	caches, err := ref.NewCaches(true)
	if err != nil {
		t.Fatal(err)
	}
	want := greedyRun(t, ref, caches, prompt, steps)
	ref.Close()
	outs := mlxtest.Ranks(t, 3, "TestDistributedRankFails", 2*time.Minute, envDistFail+"="+dir)
	for r := range faultLayer {
		var got distRun
		mlxtest.Results(t, outs[0], fmt.Sprintf("after%d", r), &got)
		if d := modeltest.MaxRel(got.Logits, want.Logits); len(got.Logits) != len(want.Logits) || d > 1e-4 || !slices.Equal(got.Tokens, want.Tokens) {
			t.Errorf("after rank %d failed a request: logits %.3g relative from one process's (%d values, want %d), tokens %v, want %v", r, d, len(got.Logits), len(want.Logits), got.Tokens, want.Tokens)
		}
	}
	for _, line := range strings.Split(outs[0], "\n") {
		if strings.Contains(line, "failing: the request failed in") {
			t.Log(strings.TrimSpace(line))
		}
	}
}
