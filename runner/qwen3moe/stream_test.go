package qwen3moe_test

import (
	"context"
	"path/filepath"
	"runtime/debug"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/residency"
)

// TestStreamedExpertsExact: a 4-bit Qwen3-MoE whose experts are read through the
// residency manager gives bit-identical logits to the mapped model, prompt and decode,
// at budgets from none beyond the experts in use up to all of them, under every
// eviction policy, with the budget changed between steps; and the manager's counters
// show the reads, evictions and guesses it made.
func TestStreamedExpertsExact(t *testing.T) {
	dir := t.TempDir()
	hf := filepath.Join(dir, "hf")
	cfg := randmodel.TinyMoE(256)
	cfg.NumLayers = 3
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 4}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "mlx")
	if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	b := cpu.New(2)
	plain, err := model.Load(out, b)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	prompt, decode := modeltest.Tokens(3, 9), modeltest.Tokens(5, 12)
	run := func(m *model.Model, between func(step int)) [][]float32 {
		caches, err := m.NewCaches(false)
		if err != nil {
			t.Fatal(err)
		}
		var all [][]float32
		// The prompt in chunks of 4: a prefill product picks several experts at once.
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
	want := run(plain, nil)
	const units = 3 * 8
	for _, p := range []residency.Policy{residency.Frequency, residency.LRU, residency.LFU} {
		for _, keep := range []int{0, 1, 3, 8, units} {
			res := residency.New(residency.Options{Budget: 1 << 40, Policy: p, Workers: 2})
			m, err := model.LoadWith(out, b, model.LoadConfig{Residency: res})
			if err != nil {
				t.Fatal(err)
			}
			s := res.Stats()
			if s.Units != units || s.Streamed == 0 || s.Pinned <= 0 || s.Pinned+s.Streamed != m.WeightBytes() {
				t.Fatalf("after load: %+v (weights %d)", s, m.WeightBytes())
			}
			unit := s.Total / units
			res.SetBudget(s.Pinned + int64(keep)*unit)
			got := run(m, func(step int) {
				switch step {
				case 4: // shrink to nothing beyond what is in use, then grow back
					res.SetBudget(s.Pinned)
				case 8:
					res.SetBudget(s.Pinned + int64(keep)*unit)
				}
			})
			for i := range want {
				if !slices.Equal(got[i], want[i]) {
					t.Fatalf("%v, %d experts kept: step %d: logits differ (max rel %.3g)", p, keep, i, modeltest.MaxRel(got[i], want[i]))
				}
			}
			s = res.Stats()
			// Predicted counts the guesses from the hidden state (GuessExperts),
			// RepeatGuessed the previous token's picks.
			if s.Misses == 0 || s.Reads == 0 || s.BytesRead == 0 || s.Predicted == 0 || s.RepeatGuessed == 0 {
				t.Errorf("%v, %d kept: counters %+v", p, keep, s)
			}
			if keep < units && s.Evictions == 0 {
				t.Errorf("%v, %d kept: no eviction", p, keep)
			}
			if keep >= 3 && keep < units && s.PrefetchIssued == 0 {
				t.Errorf("%v, %d kept: no guessed expert was read ahead: %+v", p, keep, s)
			}
			if keep == units && s.Hits == 0 {
				t.Errorf("all kept: no hit: %+v", s)
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestEngineWeightBudget: runner.LoadModel with a weight budget streams the experts and
// generates the same tokens as the mapped model.
func TestEngineWeightBudget(t *testing.T) {
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	if err := randmodel.Generate(hf, randmodel.TinyMoE(256), randmodel.Options{Seed: 6}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	gen := func(budget int64) ([]int32, *runner.Engine) {
		e, err := runner.LoadModel(out, runner.LoadOptions{Threads: 2, WeightBudget: budget, StreamPolicy: residency.LRU})
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
	if plain.Model.Residency() != nil {
		t.Fatal("a model without a budget streams")
	}
	got, e := gen(1) // below the pinned weights: only the experts in use stay
	defer e.Close()
	if !slices.Equal(got, want) {
		t.Fatalf("streamed tokens %v, mapped %v", got, want)
	}
	if s := e.Model.Residency().Stats(); s.Misses == 0 || s.Units != 16 {
		t.Errorf("stats %+v", s)
	}
}

// TestDecodeLoanExact: a streamed model that lends its prompt passes' room to the expert
// cache while it decodes (SetDecodeLoan) gives the mapped model's logits bit for bit; the
// loan is in use during single-row passes and taken back for a prompt's, and the Go
// heap's soft limit is lowered by it meanwhile and restored.
func TestDecodeLoanExact(t *testing.T) {
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	cfg := randmodel.TinyMoE(256)
	cfg.NumLayers = 3
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	const limit = 1 << 40
	old := debug.SetMemoryLimit(limit)
	defer debug.SetMemoryLimit(old)
	b := cpu.New(2)
	plain, err := model.Load(out, b)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	res := residency.New(residency.Options{Budget: 1 << 40, Workers: 2})
	m, err := model.LoadWith(out, b, model.LoadConfig{Residency: res})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Stats()
	unit := s.Total / int64(s.Units)
	res.SetBudget(s.Pinned + 2*unit)
	loan := 3 * unit
	m.SetDecodeLoan(loan, 1)
	pc, mc := must(plain.NewCaches(false)), must(m.NewCaches(false))
	step := func(toks []int32, lent int64) {
		t.Helper()
		want, err := plain.Forward(context.Background(), toks, pc, false)
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Forward(context.Background(), toks, mc, false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%d tokens: logits differ (max rel %.3g)", len(toks), modeltest.MaxRel(got, want))
		}
		if st := res.Stats(); st.Lent != lent || m.DecodeLoan() != lent {
			t.Fatalf("%d tokens: lent %d (model %d), want %d", len(toks), st.Lent, m.DecodeLoan(), lent)
		}
		if st := res.Stats(); st.Resident > st.Budget+st.Lent+2*unit {
			t.Fatalf("%d tokens: %d bytes resident over the budget %d and the loan %d", len(toks), st.Resident, st.Budget, st.Lent)
		}
		if got, want := debug.SetMemoryLimit(-1), int64(limit)-lent; got != want {
			t.Fatalf("%d tokens: heap limit %d, want %d", len(toks), got, want)
		}
	}
	step(modeltest.Tokens(3, 6), 0) // a prompt: nothing lent
	for i, tok := range modeltest.Tokens(7, 8) {
		step([]int32{tok}, loan)
		if i == 3 {
			step(modeltest.Tokens(11, 4), 0) // a later prompt chunk takes the loan back
		}
	}
	if st := res.Stats(); st.Evictions == 0 || st.Misses == 0 {
		t.Errorf("nothing evicted or read: %+v", st)
	}
	// Closed while lending: the heap's limit gets the loan back.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("heap limit %d after the model closed, want %d", got, int64(limit))
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
