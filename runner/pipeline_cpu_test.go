package runner

import (
	"context"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/pipeline"
	"github.com/mlxg/mlxg/runner/pipeline/pipelinetest"
)

// TestPipelineEngineCPU runs the engine on a model split over two CPU ranks, wired as
// the server wires it (LoadOptions.Pipeline), each rank with its own prefix cache, for a
// dense and a hybrid random model: a 600-token prompt and 6 greedy tokens, then the same
// prompt again, whose repeat restores its prefix on both ranks (rank 1 is handed only
// the positions computed again) and gives the same tokens as one process. The ranks are
// goroutines joined by pipelinetest's in-memory transport (runner/pipeline's own tests
// check the logits bit for bit); the MLX test of the same is TestDistributedPrefixCache.
func TestPipelineEngineCPU(t *testing.T) {
	four := func(c randmodel.Config) randmodel.Config { c.NumLayers = 4; return c }
	dense := randmodel.Tiny("qwen3", 512)
	dense.NumLayers = 4
	e2b := randmodel.TinyGemma4(512)
	e2b.NumLayers = 8
	archs := []struct {
		name string
		cfg  randmodel.Config
	}{
		{"qwen3", dense},
		{"qwen3_next", randmodel.TinyQwen3Next(512)},
		{"mistral", four(randmodel.TinyMistral(512))}, // sliding windows
		{"phi3", four(randmodel.TinyPhi3(512))},       // fused projections bound by parts, longrope
		{"gpt_oss", randmodel.TinyGptOss(512)},        // sliding windows beside full layers, sinks, clamped experts
		{"gemma4", randmodel.TinyGemma4MoE(512)},      // GELU-gated experts beside the MLP, unit value norms on every rank
		{"gemma4_e2b", e2b},                           // per-layer inputs carried to rank 1, layers 6 and 7 reading 4's and 5's KV on rank 1
	}
	prompt := modeltest.Tokens(9, 600)
	o := Greedy()
	o.NumPredict = 6
	o.NumDraft = 0 // a split model drafts nothing (no verification passes): compare plain decoding
	gen := func(e *Engine) *Result {
		t.Helper()
		res, err := e.GenerateTokens(context.Background(), prompt, o, func(int32) (bool, error) { return false, nil })
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for i, a := range archs {
		dir := random4Bit(t, a.name, a.cfg, uint64(4+i))
		one, err := LoadModel(dir, LoadOptions{Backend: cpu.New(2)})
		if err != nil {
			t.Fatal(err)
		}
		want := gen(one).Tokens
		one.Close()
		t.Run(a.name, func(t *testing.T) {
			prefix := make([]*kvstore.PrefixCache, 2)
			for r := range prefix {
				pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{})
				if err != nil {
					t.Fatal(err)
				}
				prefix[r] = pc
			}
			p := pipelinetest.Start(t, pipelinetest.Config{
				Ranks:   2,
				Backend: func(int) compute.Backend { return cpu.New(2) },
				Prefix:  func(r int) *kvstore.PrefixCache { return prefix[r] },
			})
			e, err := LoadModel(dir, LoadOptions{Backend: p.Backends[0], Prefix: prefix[0], Pipeline: p.Leader})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if st, ok := pipeline.StageOf(e.Model); !ok || st.Hi != a.cfg.NumLayers/2 {
				t.Fatalf("the engine's model is %v (a stage: %v), want rank 0's half of %d layers", st, ok, a.cfg.NumLayers)
			}
			width := e.Model.Config.HiddenSize // what crosses per position: the stream, and what the network carries beside it
			if c, ok := e.Model.Network().(interface{ CarriedCols() int }); ok {
				width += c.CarriedCols()
			}
			sent := func() int { return p.Net.Traffic(0, 1).FloatValues / width } // positions handed to rank 1
			cold := gen(e)
			coldSent := sent()
			hit := gen(e)
			hitSent := sent() - coldSent
			if !slices.Equal(cold.Tokens, want) || !slices.Equal(hit.Tokens, want) {
				t.Errorf("two ranks gave %v cold and %v from the prefix cache, one process %v", cold.Tokens, hit.Tokens, want)
			}
			if hit.Prefix == nil || hit.Prefix.Cached < 512 || hit.Prefix.Prefilled > len(prompt)-512 {
				t.Fatalf("the repeat's prefix: %+v, want at least two blocks (512 tokens) restored", hit.Prefix)
			}
			// Rank 1 computed only what rank 0 computed again: it restored the rest
			// from its own prefix cache.
			if coldSent < len(prompt) || hitSent >= coldSent-512 || hitSent < hit.Prefix.Prefilled {
				t.Errorf("positions handed to rank 1: %d cold, %d on the repeat (which computed %d prompt tokens again)", coldSent, hitSent, hit.Prefix.Prefilled)
			}
			for r, b := range p.Backends {
				if w := b.Work(); w.Passes == 0 || len(w.Layers) != a.cfg.NumLayers/2 {
					t.Errorf("rank %d ran %d passes over layers %v", r, w.Passes, w.Layers)
				}
			}
			t.Logf("%s: tokens %v, as one process, cold and restored; the repeat restored %d prompt tokens on both ranks and handed %d positions to rank 1 (%d cold)",
				a.name, hit.Tokens, hit.Prefix.Cached, hitSent, coldSent)
		})
	}
}
