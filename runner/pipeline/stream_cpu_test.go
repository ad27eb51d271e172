package pipeline_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/pipeline"
	"github.com/mlxg/mlxg/runner/pipeline/pipelinetest"
)

// TestPipelineStreamWidthCPU: a Gemma 4 whose hidden size equals its full layers' head
// size (64, the e2e stand-in's), so that the unit value norm every rank holds meets a
// tensor as wide as the residual stream inside other ranks' layers. Over two and three
// ranks its text-only logits are bit-identical to one process's: the stages find the
// stream by where it comes from, not by its width (a rank that took the value norm's
// input for the stream waited for a transfer that never came).
func TestPipelineStreamWidthCPU(t *testing.T) {
	c := randmodel.TinyGemma4(512)
	c.Arch, c.KVSharedLayers, c.DoubleWideMLP, c.PerLayerInput = "gemma4", 0, false, 4
	c.HiddenSize, c.IntermediateSize = 64, 96
	if c.HiddenSize != c.GlobalHeadDim {
		t.Fatalf("the model's hidden size %d should equal its full layers' head size %d", c.HiddenSize, c.GlobalHeadDim)
	}
	dir := filepath.Join(t.TempDir(), "gemma4")
	if err := randmodel.Generate(dir, c, randmodel.Options{Seed: 21}); err != nil {
		t.Fatal(err)
	}
	prompt, steps := modeltest.Tokens(5, 21), 4
	ref, err := model.Load(dir, cpu.New(cpuThreads))
	if err != nil {
		t.Fatal(err)
	}
	want := greedyRun(t, ref, pipeCaches(t, ref, dir, "fp32"), prompt, 8, steps)
	ref.Close()
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d_ranks", n), func(t *testing.T) {
			p := pipelinetest.Start(t, pipelinetest.Config{Ranks: n, Backend: func(int) compute.Backend { return cpu.New(cpuThreads) }})
			m, err := p.Leader.Load(dir, p.Backends[0])
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			stages, err := pipeline.SplitModel(m.Config, n)
			if err != nil {
				t.Fatal(err)
			}
			before := snapshot(p.Net)
			got := greedyRun(t, m, pipeCaches(t, m, dir, "fp32"), prompt, 8, steps)
			if d := bitDiffs(got.Logits, want.Logits); d > 0 {
				t.Errorf("%d of %d logits differ from the unsplit model's (largest relative difference %.3g)", d, len(want.Logits), modeltest.MaxRel(got.Logits, want.Logits))
			}
			checkSplit(t, p, stages, got, before, m)
			t.Logf("%v: %d passes, logits bit-identical to one process's, tokens %v", stages, got.Passes, got.Tokens)
		})
	}
}
