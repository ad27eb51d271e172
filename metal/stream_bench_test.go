package metal_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mlxg/mlxg/metal"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/residency"
)

// BenchmarkStreamSync is what streaming costs a decode step on MLX when every expert is
// already in its layer's slots: the per-layer synchronisation that brings the router's
// top-k to the host (one mlx_eval per MoE layer instead of one per step), the remap to
// slot indices and the graph built in pieces. A random 4-bit Qwen3-MoE (8 layers, 32
// experts, top 8, hidden 512, expert width 256) decodes 16 steps after a 4-token prompt,
// mapped and streamed with a budget that holds every expert, taking turns (the order
// reversed every other round); the median step of each, their ratio and the cost per
// synchronisation ((streamed − mapped) / layers) are reported, measured in the same run.
// A third run streams with the top-k's slots alone, every miss read from the checkpoint
// (the manager drops the file's pages after each read) and copied into a slot; the CPU
// backend, mapped and streaming only the experts in use, is the reference for what a
// miss costs without slots.
//
//	go test -run '^$' -bench StreamSync -benchtime 1x ./metal/
//
// MLXG_BENCH_ROUNDS is the number of rounds (7).
func BenchmarkStreamSync(b *testing.B) {
	mlx := mlxtest.Opener(b)
	dir := b.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	cfg := randmodel.Tiny("qwen3_moe", 1024)
	cfg.NumLayers, cfg.HiddenSize, cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim = 8, 512, 8, 2, 64
	cfg.NumExperts, cfg.TopK, cfg.MoEIntermediate, cfg.NormTopK = 32, 8, 256, true
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 3}); err != nil {
		b.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: 4, GroupSize: 64}); err != nil {
		b.Fatal(err)
	}
	type variant struct {
		name   string
		m      *model.Model
		mb     *metal.Backend
		steps  []time.Duration
		evals  int
		misses int64 // over the timed decode steps
	}
	var vs []*variant
	for _, v := range []struct {
		name   string
		cpu    bool
		budget int64
	}{
		{"mlx mapped", false, 0},
		{"mlx streamed, all in slots", false, 1 << 40},
		{"mlx streamed, top-k slots", false, 1},
		{"cpu mapped", true, 0},
		{"cpu streamed, in-use only", true, 1},
	} {
		var be compute.Backend = cpu.New(2)
		if !v.cpu {
			var err error
			if be, err = mlx(); err != nil {
				b.Fatal(err)
			}
		}
		var res *residency.Manager
		if v.budget > 0 {
			res = residency.New(residency.Options{Budget: v.budget})
		}
		m, err := model.LoadWith(out, be, model.LoadConfig{Residency: res})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		mb, _ := be.(*metal.Backend)
		vs = append(vs, &variant{name: v.name, m: m, mb: mb})
	}
	prompt, decode := modeltest.Tokens(1, 4), modeltest.Tokens(2, 16)
	run := func(v *variant, timed bool) {
		caches, err := v.m.NewCaches(false)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := v.m.Forward(context.Background(), prompt, caches, false); err != nil {
			b.Fatal(err)
		}
		evals := 0
		if v.mb != nil {
			evals = v.mb.Evals()
		}
		missed := func() int64 {
			if res := v.m.Residency(); res != nil {
				return res.Stats().Misses
			}
			return 0
		}
		before := missed()
		for _, tok := range decode {
			start := time.Now()
			if _, err := v.m.Forward(context.Background(), []int32{tok}, caches, false); err != nil {
				b.Fatal(err)
			}
			if timed {
				v.steps = append(v.steps, time.Since(start))
			}
		}
		if v.mb != nil {
			v.evals = (v.mb.Evals() - evals) / len(decode)
		}
		if timed {
			v.misses += missed() - before
		}
	}
	for _, v := range vs {
		run(v, false) // warm: the streamed model's slots fill here
	}
	rounds := envInt("MLXG_BENCH_ROUNDS", 7)
	for i := range rounds {
		order := slices.Clone(vs)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, v := range order {
			run(v, true)
		}
	}
	median := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	base := median(vs[0].steps)
	for i, v := range vs {
		if i == 3 {
			base = median(v.steps)
		}
		md := median(v.steps)
		line := fmt.Sprintf("%-28s %8.3f ms/step  %.3fx of mapped", v.name, float64(md.Microseconds())/1e3, float64(md)/float64(base))
		if v.mb != nil {
			line += fmt.Sprintf("  %d evals/step", v.evals)
		}
		if v.m.Residency() != nil {
			perTok := float64(v.misses) / float64(len(v.steps))
			line += fmt.Sprintf("  %.1f of %d picks missed per step", perTok, cfg.NumLayers*cfg.TopK)
			if v.misses > 0 && i != 1 {
				line += fmt.Sprintf(", %.2f ms more per miss", float64((md-base).Microseconds())/1e3/perTok)
			}
		}
		b.Log(line)
	}
	extra := median(vs[1].steps) - median(vs[0].steps)
	b.Logf("per synchronisation: %.1f µs (%d layers)", float64(extra.Nanoseconds())/1e3/float64(cfg.NumLayers), cfg.NumLayers)
	b.ReportMetric(float64(extra.Nanoseconds())/1e3/float64(cfg.NumLayers), "µs/sync")
}
