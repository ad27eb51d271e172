package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/residency"
)

// TestPlanStreaming: with a weight budget a mixture-of-experts model plans in streaming
// mode, the KV policy counting the budget instead of the weights; a model that fits and
// has no budget plans as usual.
func TestPlanStreaming(t *testing.T) {
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	if err := randmodel.Generate(hf, randmodel.TinyMoE(256), randmodel.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	var size int64
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			size += fi.Size()
		}
	}
	m := &registry.LocalModel{Name: "moe", Dir: out, Size: size}
	const gib = 1 << 30
	l := &EngineLoader{KV: &kvstore.Policy{Sensor: sysmem.Fixed{Total: 16 * gib, Available: 8 * gib}}}
	p, err := l.Plan(m, 512, 0)
	if err != nil || p.WeightBudget != 0 {
		t.Fatalf("no budget: %+v, %v", p, err)
	}
	experts, err := residency.ExpertBytes(out)
	if err != nil || experts <= 0 || experts >= size {
		t.Fatalf("expert bytes %d of %d: %v", experts, size, err)
	}
	budget := size - experts/2
	l.WeightBudget = budget
	s, err := l.Plan(m, 512, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.WeightBudget != budget || s.Experts != experts || s.Weights != size || s.kv == nil || s.kv.plan.Weights != budget || s.Size >= p.Size {
		t.Errorf("streaming plan %+v (weights %d), mapped %+v", s, s.kv.plan.Weights, p)
	}
}

func TestBudgetUnderPressure(t *testing.T) {
	for _, c := range []struct {
		p    sysmem.Pressure
		want int64
	}{{sysmem.Normal, 1000}, {sysmem.Warn, 600}, {sysmem.Critical, 400}} {
		if got := budgetUnderPressure(1000, 200, c.p); got != c.want {
			t.Errorf("%v: %d, want %d", c.p, got, c.want)
		}
	}
	if got := residency.AutoBudget(100, 1000, 400); got != 400 {
		t.Errorf("AutoBudget: %d", got)
	}
	if got := residency.AutoBudget(100, 1000, -5); got != 0 {
		t.Errorf("AutoBudget with nothing free: %d", got)
	}
}
