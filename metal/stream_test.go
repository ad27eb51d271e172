package metal_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/metal"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/residency"
)

// tinyMoE writes a 3-layer, 8-expert, top-2 Qwen3-MoE quantized to 4 bits in groups of
// 32 and returns its folder.
func tinyMoE(t *testing.T, seed uint64) string {
	cfg := randmodel.TinyMoE(256)
	cfg.NumLayers = 3
	return quantized(t, cfg, seed)
}

// quantized writes a random checkpoint of cfg quantized to 4 bits in groups of 32.
func quantized(t *testing.T, cfg randmodel.Config, seed uint64) string {
	t.Helper()
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: seed}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStreamedExpertsOnMLX: on MLX, a Qwen3-MoE whose experts are read through the
// residency manager into per-layer slots gives the logits of the model with every
// expert in MLX arrays (a prompt in chunks whose picks outnumber the slots, then decode
// steps), at budgets from the top-k's slots alone up to every expert, under each
// eviction policy, with the budget shrunk and grown back between steps (slots resized
// with their experts kept); the manager counts the hits, misses and reads.
func TestStreamedExpertsOnMLX(t *testing.T) {
	mlx := mlxtest.Opener(t)
	dir := tinyMoE(t, 4)
	testStreamedOnMLX(t, mlx, dir, 3*8, []residency.Policy{residency.Frequency, residency.LRU}, []float64{0, 0.6, 1, 2})
}

// TestStreamedQwen3NextOnMLX: the same for Qwen3-Next, whose MoE layers (a shared
// expert beside the streamed ones) alternate with recurrent layers.
func TestStreamedQwen3NextOnMLX(t *testing.T) {
	mlx := mlxtest.Opener(t)
	dir := quantized(t, randmodel.TinyQwen3Next(256), 8)
	testStreamedOnMLX(t, mlx, dir, 4*8, []residency.Policy{residency.Frequency}, []float64{0, 1})
}

// TestStreamedGptOssMXFP4OnMLX: the same for gpt-oss as mlx-community ships it
// (MXFP4-Q8: the experts in mxfp4, two parts per matrix, codes and uint8 scales; the
// rest 8-bit), whose experts' biases are bound whole beside the slots.
func TestStreamedGptOssMXFP4OnMLX(t *testing.T) {
	mlx := mlxtest.Opener(t)
	cfg := randmodel.TinyGptOss(256)
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 11}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: 8, GroupSize: 64, Experts: quant.MXFP4}); err != nil {
		t.Fatal(err)
	}
	testStreamedOnMLX(t, mlx, out, cfg.NumLayers*cfg.NumExperts, []residency.Policy{residency.Frequency, residency.LRU}, []float64{0, 0.6, 2})
}

func testStreamedOnMLX(t *testing.T, mlx func() (compute.Backend, error), dir string, units int, policies []residency.Policy, keeps []float64) {
	prompt, decode := modeltest.Tokens(3, 9), modeltest.Tokens(5, 12)
	run := func(m *model.Model, between func(step int)) [][]float32 {
		caches, err := m.NewCaches(false)
		if err != nil {
			t.Fatal(err)
		}
		var all [][]float32
		all = append(all, modeltest.Forward(t, m, caches, prompt, 4))
		for i, tok := range decode {
			if between != nil {
				between(i)
			}
			l, err := m.Forward(context.Background(), []int32{tok}, caches, false)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, l)
		}
		return all
	}
	load := func(res *residency.Manager) *model.Model {
		b, err := mlx()
		if err != nil {
			t.Fatal(err)
		}
		m, err := model.LoadWith(dir, b, model.LoadConfig{Residency: res})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	plain := load(nil)
	want := run(plain, nil)
	plain.Close()
	for _, p := range policies {
		for _, keep := range keeps {
			res := residency.New(residency.Options{Budget: 1 << 40, Policy: p, Workers: 2})
			m := load(res)
			s := res.Stats()
			if s.Units != units || s.Pinned <= 0 || s.Pinned+s.Streamed != m.WeightBytes() {
				t.Fatalf("after load: %+v (weights %d)", s, m.WeightBytes())
			}
			budget := s.Pinned + int64(keep*float64(s.Total))
			res.SetBudget(budget)
			got := run(m, func(step int) {
				switch step {
				case 4: // the top-k's slots alone, then back
					res.SetBudget(s.Pinned)
				case 8:
					res.SetBudget(budget)
				}
			})
			// The same kernel over the same bytes: MLX's CPU gives identical logits; the
			// tolerance is MLX's, for a GPU whose kernels may tile a stack of another size
			// differently.
			same := 0
			for i := range want {
				if rel := modeltest.MaxRel(got[i], want[i]); rel > 1e-5 {
					t.Fatalf("%v, budget %.1f of the experts: step %d: logits differ (max rel %.3g)", p, keep, i, rel)
				}
				if slices.Equal(got[i], want[i]) {
					same++
				}
			}
			s = res.Stats()
			t.Logf("%v, budget %.1f of the experts: %d of %d steps bit-identical; hits %d misses %d reads %d (%d bytes), predicted %d/%d",
				p, keep, same, len(want), s.Hits, s.Misses, s.Reads, s.BytesRead, s.PredictedRight, s.Predicted)
			if s.Misses == 0 || s.Reads == 0 || s.BytesRead == 0 || s.Predicted == 0 || s.Hits == 0 {
				t.Errorf("%v, %.1f: counters %+v", p, keep, s)
			}
			if keep == 0 && s.Reads <= int64(units) {
				t.Errorf("%v, %.1f: %d reads of %d units: nothing evicted and read again", p, keep, s.Reads, units)
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestEngineWeightBudgetOnMLX: runner.LoadModel on MLX with a weight budget below the
// pinned weights streams the experts and generates the tokens of the mapped model.
func TestEngineWeightBudgetOnMLX(t *testing.T) {
	mlx := mlxtest.Opener(t)
	dir := tinyMoE(t, 6)
	gen := func(budget int64) ([]int32, *runner.Engine) {
		b, err := mlx()
		if err != nil {
			t.Fatal(err)
		}
		e, err := runner.LoadModel(dir, runner.LoadOptions{Backend: b, WeightBudget: budget, StreamPolicy: residency.LRU})
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
	got, e := gen(1)
	defer e.Close()
	if e.Model.Residency() == nil {
		t.Fatal("the model does not stream on MLX")
	}
	if !slices.Equal(got, want) {
		t.Fatalf("streamed tokens %v, mapped %v", got, want)
	}
	if s := e.Model.Residency().Stats(); s.Misses == 0 || s.Units != 24 {
		t.Errorf("stats %+v", s)
	}
}

// TestSlotUpdateInPlace: MLX writes an expert into its slot in place once the slot
// array's old handle is let go; a copy of every slot per expert read would cost a
// layer's slots in memory traffic.
func TestSlotUpdateInPlace(t *testing.T) {
	in, err := mlxtest.Backend(t).SlotUpdateInPlace()
	if err != nil {
		t.Fatal(err)
	}
	if !in {
		t.Error("slice_update copied the whole array")
	}
}

// TestStreamedReadErrorOnMLX: an expert that cannot be read (the checkpoint cut short
// after the load) fails the pass with the read's error instead of hanging or crashing,
// and the backend still runs passes afterwards.
func TestStreamedReadErrorOnMLX(t *testing.T) {
	mlx := mlxtest.Opener(t)
	dir := tinyMoE(t, 5)
	b, err := mlx()
	if err != nil {
		t.Fatal(err)
	}
	if d := b.(*metal.Backend).Device(); d != "cpu" {
		// MLX's CPU copies the pinned weights at load; a GPU maps the file's pages,
		// which cutting the file would take away under it.
		t.Skipf("cutting a checkpoint mapped by MLX on %s", d)
	}
	res := residency.New(residency.Options{Budget: 1, Workers: 1})
	m, err := model.LoadWith(dir, b, model.LoadConfig{Residency: res})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	files, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	for _, f := range files {
		if err := os.Truncate(f, 4096); err != nil {
			t.Fatal(err)
		}
	}
	caches, err := m.NewCaches(false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Forward(context.Background(), modeltest.Tokens(1, 3), caches, false); err == nil {
		t.Fatal("a pass over a cut checkpoint succeeded")
	} else {
		t.Logf("error: %v", err)
	}
	// The backend itself is fine: another model runs on it.
	other, err := model.Load(tinyMoE(t, 6), b)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if caches, err = other.NewCaches(false); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Forward(context.Background(), modeltest.Tokens(1, 3), caches, false); err != nil {
		t.Fatal(err)
	}
}
