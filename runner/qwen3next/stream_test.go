package qwen3next_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/residency"
)

// TestStreamedExact: a 4-bit Qwen3-Next whose experts are read through the residency
// manager, with the next layer's experts guessed from the hidden state and read ahead,
// gives the mapped model's logits bit for bit, at budgets of one expert and of a few
// beyond the pinned weights.
func TestStreamedExact(t *testing.T) {
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	cfg := randmodel.TinyQwen3Next(256)
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 6}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	b := cpu.New(2)
	plain, err := model.Load(out, b)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	prompt, decode := modeltest.Tokens(3, 6), modeltest.Tokens(5, 8)
	run := func(m *model.Model) [][]float32 {
		caches, err := m.NewCaches(false)
		if err != nil {
			t.Fatal(err)
		}
		all := [][]float32{modeltest.Forward(t, m, caches, prompt, 3)}
		for _, tok := range decode {
			l, err := m.Forward(context.Background(), []int32{tok}, caches, false)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, l)
		}
		return all
	}
	want := run(plain)
	for _, keep := range []int{1, 5} {
		res := residency.New(residency.Options{Budget: 1 << 40, Workers: 2})
		m, err := model.LoadWith(out, b, model.LoadConfig{Residency: res})
		if err != nil {
			t.Fatal(err)
		}
		s := res.Stats()
		if s.Units != cfg.NumLayers*cfg.NumExperts {
			t.Fatalf("%d units, want one per expert of every layer", s.Units)
		}
		res.SetBudget(s.Pinned + int64(keep)*s.Total/int64(s.Units))
		got := run(m)
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Fatalf("%d experts kept: step %d: logits differ (max rel %.3g)", keep, i, modeltest.MaxRel(got[i], want[i]))
			}
		}
		if s := res.Stats(); s.Evictions == 0 || s.Predicted == 0 {
			t.Errorf("%d kept: counters %+v", keep, s)
		}
		m.Close()
	}
}
