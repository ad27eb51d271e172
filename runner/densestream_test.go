package runner_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner"
	_ "github.com/mlxg/mlxg/runner/model/all"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// TestEngineWeightBudgetDense: runner.LoadModel with a weight budget streams a dense
// model's layers and generates the same tokens as the mapped model, at a budget that
// keeps some layers and at one that keeps none. Phi-3's fused projections, bound by
// their parts' rows, stay resident while the rest of each layer streams.
func TestEngineWeightBudgetDense(t *testing.T) {
	for _, cfg := range []randmodel.Config{randmodel.Tiny("qwen3", 256), randmodel.TinyPhi3(256)} {
		t.Run(cfg.Arch, func(t *testing.T) { weightBudgetDense(t, cfg) })
	}
}

func weightBudgetDense(t *testing.T, cfg randmodel.Config) {
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	cfg.NumLayers = 6
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 6}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	gen := func(budget int64) ([]int32, *runner.Engine) {
		e, err := runner.LoadModel(out, runner.LoadOptions{Threads: 2, WeightBudget: budget})
		if err != nil {
			t.Fatal(err)
		}
		o := runner.DefaultOptions()
		o.NumPredict, o.Temperature = 16, 0
		res, err := e.GenerateTokens(context.Background(), modeltest.Tokens(2, 7), o, func(int32) (bool, error) { return false, nil })
		if err != nil {
			t.Fatal(err)
		}
		return res.Tokens, e
	}
	want, plain := gen(0)
	defer plain.Close()
	probe, pe := gen(1 << 40)
	pe.Close()
	if !slices.Equal(probe, want) {
		t.Fatalf("streamed with every layer kept: tokens %v, mapped %v", probe, want)
	}
	st := pe.Model.Residency().Stats()
	layer := st.Total / int64(st.Units)
	for _, budget := range []int64{st.Pinned + 4*layer, 1} {
		got, e := gen(budget)
		res := e.Model.Residency()
		if res == nil || !res.Dense() {
			t.Fatalf("budget %d: the dense model does not stream its layers", budget)
		}
		if !slices.Equal(got, want) {
			t.Errorf("budget %d: streamed tokens %v, mapped %v", budget, got, want)
		}
		if s := res.Stats(); s.Misses == 0 || s.Units != 6 {
			t.Errorf("budget %d: stats %+v", budget, s)
		}
		e.Close()
	}
}
