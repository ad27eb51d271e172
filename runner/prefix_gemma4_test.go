package runner

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/model"
)

// TestPrefixCacheGemma4SSD: Gemma 4's E2B kind (sliding and full layers of two head
// sizes, KV-shared layers that store nothing) restored from the SSD tier after a restart,
// with the KV policy's caches (4-bit weights, K8/V4 caches), continues token for token
// as a cold run: the shared layers read their sources' restored blocks and windows.
func TestPrefixCacheGemma4SSD(t *testing.T) {
	dir := t.TempDir()
	hf, mlx := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	if err := randmodel.Generate(hf, randmodel.TinyGemma4(256), randmodel.Options{Seed: 9}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, mlx, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	base, err := LoadModel(mlx, LoadOptions{Logger: quietLog(), Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	cfg, _ := os.ReadFile(filepath.Join(mlx, "config.json"))
	shape, err := kvstore.ShapeFromConfig(cfg, base.Model.WeightBytes())
	if err != nil {
		t.Fatal(err)
	}
	a := kvstore.AffineFormat
	layout, err := kvstore.NewLayout(shape, kvstore.Spec{K: a(8, 32), V: a(4, 32)}, 0, kvstore.SpecF16)
	if err != nil {
		t.Fatal(err)
	}
	ref := *base
	ref.kv = func(*model.Model, int) ([]kvstore.Layer, error) { return kvstore.NewCaches(shape, layout) }
	r := rand.New(rand.NewPCG(9, 10))
	words := func(n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(r.IntN(256))
		}
		return out
	}
	turn1 := words(300)
	turn2 := append(slices.Clone(turn1), words(220)...)
	turn3 := append(slices.Clone(turn2), words(30)...)
	o := Greedy()
	o.NumPredict = 6
	o.NumBatch = 64
	gen := func(e *Engine, prompt []int32) *Result {
		t.Helper()
		res, err := e.GenerateTokens(context.Background(), prompt, o, func(int32) (bool, error) { return false, nil })
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	cacheDir := t.TempDir()
	open := func() *Engine {
		pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: cacheDir, Log: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		e := ref
		e.prefix = newPrefixEngine(pc, mlx, quietLog())
		return &e
	}
	check := func(e *Engine, prompt []int32, wantCached, wantDisk int) {
		t.Helper()
		got, want := gen(e, prompt), gen(&ref, prompt)
		if !slices.Equal(got.Tokens, want.Tokens) {
			t.Fatalf("%d-token prompt with %d cached tokens: %v, cold %v", len(prompt), got.Prefix.Cached, got.Tokens, want.Tokens)
		}
		if st := got.Prefix; st.Cached != wantCached || st.DiskHits != wantDisk {
			t.Fatalf("%d-token prompt: %+v, want %d cached, %d blocks from SSD", len(prompt), *st, wantCached, wantDisk)
		}
	}
	e := open()
	check(e, turn1, 0, 0)
	check(e, turn2, len(turn1)-1, 0) // RAM: the first turn's prompt
	e.prefix.cache.Close()           // the SSD writer finishes
	e = open()                       // a restart: RAM empty
	check(e, turn3, len(turn2)-1, 3) // SSD: two full blocks and the partial at turn2's end
}
