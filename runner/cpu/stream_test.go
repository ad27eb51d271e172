package cpu

import (
	stdctx "context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/model"
	_ "github.com/mlxg/mlxg/runner/model/all"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/residency"
)

// TestStreamedOrders: both ways a streamed MoE runs its experts, in order with a window
// of reads ahead (a prompt's many picks) and hits first with the outputs added up in
// order (a decode step's few), give the mapped model's logits bit for bit, under a
// budget of a single expert beyond the pinned weights.
func TestStreamedOrders(t *testing.T) {
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	if err := randmodel.Generate(hf, randmodel.TinyMoE(256), randmodel.Options{Seed: 8}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(stdctx.Background(), hf, out, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	b := New(2)
	plain, err := model.Load(out, b)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	tokens := modeltest.Tokens(4, 12)
	forward := func(m *model.Model) []float32 {
		caches, _ := m.NewCaches(false)
		var all []float32
		for _, chunk := range [][]int32{tokens[:8], tokens[8:9], tokens[9:10], tokens[10:]} {
			l, err := m.Forward(stdctx.Background(), chunk, caches, true)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, l...)
		}
		return all
	}
	want := forward(plain)
	defer func(v int) { deferLimit = v }(deferLimit)
	for _, limit := range []int{0, 1 << 20} {
		deferLimit = limit
		res := residency.New(residency.Options{Budget: 1 << 40})
		m, err := model.LoadWith(out, b, model.LoadConfig{Residency: res})
		if err != nil {
			t.Fatal(err)
		}
		s := res.Stats()
		res.SetBudget(s.Pinned + s.Total/int64(s.Units))
		if got := forward(m); !slices.Equal(got, want) {
			t.Errorf("defer limit %d: logits differ (max rel %.3g)", limit, modeltest.MaxRel(got, want))
		}
		if s := res.Stats(); s.Evictions == 0 {
			t.Errorf("defer limit %d: no eviction: %+v", limit, s)
		}
		m.Close()
	}
}

// TestStreamUnquantized: a model given a residency manager with no quantized matrices
// to stream (a float dense model) runs from the mapping, without the manager.
func TestStreamUnquantized(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "hf")
	if err := randmodel.Generate(out, randmodel.Tiny("qwen3", 256), randmodel.Options{Seed: 2}); err != nil {
		t.Fatal(err)
	}
	res := residency.New(residency.Options{Budget: 1})
	m, err := model.LoadWith(out, New(2), model.LoadConfig{Residency: res})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Residency() != nil {
		t.Fatal("a float model kept its residency manager")
	}
	if _, err := res.Acquire(0); err == nil {
		t.Fatal("the unused manager was not closed")
	}
}
