package metal_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mlxg/mlxg/metal"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
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
		name  string
		m     *model.Model
		mb    *metal.Backend
		steps []time.Duration
		evals int
	}
	var vs []*variant
	for _, stream := range []bool{false, true} {
		be, err := mlx()
		if err != nil {
			b.Fatal(err)
		}
		var res *residency.Manager
		name := "mapped"
		if stream {
			res, name = residency.New(residency.Options{Budget: 1 << 40}), "streamed, all experts in slots"
		}
		m, err := model.LoadWith(out, be, model.LoadConfig{Residency: res})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		vs = append(vs, &variant{name: name, m: m, mb: be.(*metal.Backend)})
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
		evals := v.mb.Evals()
		for _, tok := range decode {
			start := time.Now()
			if _, err := v.m.Forward(context.Background(), []int32{tok}, caches, false); err != nil {
				b.Fatal(err)
			}
			if timed {
				v.steps = append(v.steps, time.Since(start))
			}
		}
		v.evals = (v.mb.Evals() - evals) / len(decode)
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
	for _, v := range vs {
		md := median(v.steps)
		b.Logf("%-32s %8.3f ms/step  %.3fx  %d evals/step", v.name, float64(md.Microseconds())/1e3, float64(md)/float64(base), v.evals)
	}
	extra := median(vs[1].steps) - base
	b.Logf("per synchronisation: %.1f µs (%d layers)", float64(extra.Nanoseconds())/1e3/float64(cfg.NumLayers), cfg.NumLayers)
	if s := vs[1].m.Residency().Stats(); s.Misses > int64(cfg.NumLayers*cfg.NumExperts) {
		b.Errorf("the streamed model missed %d times with room for every expert", s.Misses)
	}
	b.ReportMetric(float64(extra.Nanoseconds())/1e3/float64(cfg.NumLayers), "µs/sync")
}
