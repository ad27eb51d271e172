package cpu

import (
	stdctx "context"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/residency"
)

// denseModel writes a random 4-bit dense model of 6 layers.
func denseModel(t *testing.T, arch string) string {
	t.Helper()
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	cfg := randmodel.Tiny(arch, 256)
	cfg.NumLayers = 6
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(stdctx.Background(), hf, out, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	return out
}

// denseForward runs a prompt chunk and single-token steps, returning every logit.
func denseForward(t *testing.T, m *model.Model, between func(step int)) []float32 {
	t.Helper()
	tokens := modeltest.Tokens(4, 14)
	caches, _ := m.NewCaches(false)
	var all []float32
	for i, chunk := range [][]int32{tokens[:6], tokens[6:7], tokens[7:8], tokens[8:10], tokens[10:11], tokens[11:12], tokens[12:13], tokens[13:]} {
		if between != nil {
			between(i)
		}
		l, err := m.Forward(stdctx.Background(), chunk, caches, true)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, l...)
	}
	return all
}

// TestStreamedLayers: a dense model whose layers stream gives the mapped model's logits
// bit for bit at every budget, from one that keeps every layer to one that holds no
// layer beyond the one in use, and through budgets that change between steps (layers
// dropped from and taken back into the kept set); the kept set is the size the budget
// allows and the streamed layers are read once per pass.
func TestStreamedLayers(t *testing.T) {
	for _, arch := range []string{"qwen3", "qwen2"} { // qwen2: biases beside the streamed matrices
		t.Run(arch, func(t *testing.T) {
			out := denseModel(t, arch)
			b := New(2)
			plain, err := model.Load(out, b)
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			want := denseForward(t, plain, nil)

			probe := residency.New(residency.Options{Budget: 1 << 40, Buffered: true})
			pm, err := model.LoadWith(out, b, model.LoadConfig{Residency: probe})
			if err != nil {
				t.Fatal(err)
			}
			s := probe.Stats()
			if !probe.Dense() || s.Units != 6 {
				t.Fatalf("dense %v, %d units, want 6 layers", probe.Dense(), s.Units)
			}
			pinned, layer := s.Pinned, s.Total/6
			pm.Close()

			for _, tc := range []struct {
				name   string
				budget int64
				kept   int
				change func(res *residency.Manager, step int)
			}{
				{"all kept", pinned + 6*layer, 6, nil},
				{"four", pinned + 4*layer, 2, nil},
				{"three", pinned + 3*layer, 1, nil},
				{"two", pinned + 2*layer, 0, nil},
				{"one", pinned + layer, 0, nil},
				{"none", 1, 0, nil},
				{"changing", pinned + 6*layer, 6, func(res *residency.Manager, step int) {
					res.SetBudget(pinned + []int64{6, 3, 5, 1, 4, 0, 2, 6}[step]*layer)
				}},
			} {
				res := residency.New(residency.Options{Budget: tc.budget, Workers: 3, Buffered: true})
				m, err := model.LoadWith(out, b, model.LoadConfig{Residency: res})
				if err != nil {
					t.Fatal(err)
				}
				if kept, n := res.KeptLayers(); kept != tc.kept || n != 6 {
					t.Errorf("%s: %d of %d layers kept, want %d", tc.name, kept, n, tc.kept)
				}
				var between func(int)
				if tc.change != nil {
					between = func(step int) { tc.change(res, step) }
				}
				if got := denseForward(t, m, between); !slices.Equal(got, want) {
					t.Errorf("%s: logits differ (max rel %.3g)", tc.name, modeltest.MaxRel(got, want))
				}
				st := res.Stats()
				switch {
				case tc.kept == 6 && tc.change == nil && (st.Reads != 6 || st.Evictions != 0):
					t.Errorf("%s: every layer kept, yet %d reads and %d evictions", tc.name, st.Reads, st.Evictions)
				case tc.kept < 6 && tc.change == nil && (st.Reads < 6+7*int64(6-tc.kept) || st.Reads > 6+7*int64(6-tc.kept)+1):
					// The first pass reads all six, each later one the streamed ones; the last
					// may have read the next pass's first streamed layer ahead.
					t.Errorf("%s: %d reads, want %d or one more", tc.name, st.Reads, 6+7*(6-tc.kept))
				}
				if tc.budget > pinned+2*layer && st.Peak > tc.budget {
					t.Errorf("%s: peak %d over the budget %d", tc.name, st.Peak, tc.budget)
				}
				m.Close()
			}
			// Direct reads (the default where the file system takes them; the byte counts
			// above assume reads through the page cache, whose units are not padded to
			// pages): the same logits.
			res := residency.New(residency.Options{Budget: pinned + 3*layer, Workers: 3})
			m, err := model.LoadWith(out, b, model.LoadConfig{Residency: res})
			if err != nil {
				t.Fatal(err)
			}
			if got := denseForward(t, m, nil); !slices.Equal(got, want) {
				t.Errorf("direct reads: logits differ (max rel %.3g)", modeltest.MaxRel(got, want))
			}
			m.Close()
		})
	}
}

// TestStreamedLayersConcurrent: passes of two sequences at once over a model whose
// layers stream under a budget of two layers, each holding its own layer, give the
// mapped model's logits.
func TestStreamedLayersConcurrent(t *testing.T) {
	out := denseModel(t, "llama")
	b := New(2)
	plain, err := model.Load(out, b)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	want := denseForward(t, plain, nil)
	res := residency.New(residency.Options{Budget: 1})
	m, err := model.LoadWith(out, b, model.LoadConfig{Residency: res})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := res.Stats()
	res.SetBudget(s.Pinned + 2*s.Total/6)
	var wg sync.WaitGroup
	got := make([][]float32, 3)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = denseForward(t, m, nil)
		}()
	}
	wg.Wait()
	for i, g := range got {
		if !slices.Equal(g, want) {
			t.Errorf("sequence %d: logits differ (max rel %.3g)", i, modeltest.MaxRel(g, want))
		}
	}
}
