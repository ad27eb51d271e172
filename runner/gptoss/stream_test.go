package gptoss_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/residency"
)

// TestStreamedExpertsExact: a 4-bit gpt-oss, and one as mlx-community ships it (mxfp4
// experts, the rest 8-bit), whose experts (with their biases) are read through the
// residency manager, under a budget that holds none of them beyond those in use, gives
// bit-identical logits to the mapped model, prompt and decode.
func TestStreamedExpertsExact(t *testing.T) {
	for name, opts := range map[string]create.Options{
		"4-bit":    {Bits: 4, GroupSize: 32},
		"mxfp4-q8": {Bits: 8, GroupSize: 64, Experts: quant.MXFP4},
	} {
		t.Run(name, func(t *testing.T) { testStreamedExpertsExact(t, opts) })
	}
}

func testStreamedExpertsExact(t *testing.T, opts create.Options) {
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	if err := randmodel.Generate(hf, randmodel.TinyGptOss(256), randmodel.Options{Seed: 6}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, opts); err != nil {
		t.Fatal(err)
	}
	b := cpu.New(2)
	run := func(m *model.Model) []float32 {
		caches, err := m.NewCaches(false)
		if err != nil {
			t.Fatal(err)
		}
		all := modeltest.Forward(t, m, caches, modeltest.Tokens(3, 20), 4)
		for _, tok := range modeltest.Tokens(5, 6) {
			l, err := m.Forward(context.Background(), []int32{tok}, caches, false)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, l...)
		}
		return all
	}
	plain, err := model.Load(out, b)
	if err != nil {
		t.Fatal(err)
	}
	want := run(plain)
	plain.Close()
	res := residency.New(residency.Options{Budget: 1 << 40, Policy: residency.Frequency, Workers: 2})
	m, err := model.LoadWith(out, b, model.LoadConfig{Residency: res})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := res.Stats()
	if s.Units != 4*8 || s.Streamed == 0 || s.Pinned+s.Streamed != m.WeightBytes() {
		t.Fatalf("after load: %+v, want 32 streamed experts", s)
	}
	res.SetBudget(s.Pinned)
	got := run(m)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("logit %d: %v streamed, %v mapped", i, got[i], want[i])
		}
	}
	if s := res.Stats(); s.Misses == 0 {
		t.Fatalf("no expert was read: %+v", s)
	}
}
