package runner

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/model"
)

// TestPrefixCacheGreedyIdentical serves a growing conversation on qwen3-tiny from a cold
// prefix cache, then from its RAM tier, then from its SSD tier after a restart, for every
// cache kind, and checks that every greedy continuation is token-identical to the same
// request on an engine without a prefix cache.
func TestPrefixCacheGreedyIdentical(t *testing.T) {
	for _, be := range testBackends() {
		t.Run(be.name, func(t *testing.T) { prefixCacheGreedyIdentical(t, be) })
	}
}

func prefixCacheGreedyIdentical(t *testing.T, be testBackend) {
	prefixGreedyOn(t, be, testdata.SharedModel(t, "qwen3-tiny"))
}

// TestPrefixCacheLatent is TestPrefixCacheGreedyIdentical on a random GLM-4.7-Flash
// (glm4_moe_lite, 4-bit): its latent layers' blocks (the rotary key and the latent, fp16
// and quantized) restored from RAM and from SSD give the tokens of no cache.
func TestPrefixCacheLatent(t *testing.T) {
	hf, dir := filepath.Join(t.TempDir(), "hf"), filepath.Join(t.TempDir(), "mlx")
	if err := randmodel.Generate(hf, randmodel.TinyGlm4MoeLite(20000), randmodel.Options{Seed: 8}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, dir, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	for _, be := range testBackends() {
		t.Run(be.name, func(t *testing.T) { prefixGreedyOn(t, be, dir) })
	}
}

func prefixGreedyOn(t *testing.T, be testBackend, dir string) {
	base, err := be.load(t, dir, LoadOptions{Logger: quietLog(), Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	shape, err := kvstore.ShapeFromConfig(cfg, base.Model.WeightBytes())
	if err != nil {
		t.Fatal(err)
	}
	a := kvstore.AffineFormat
	layout := func(spec kvstore.Spec, boundary, maxKV int) func(*model.Model, int) ([]kvstore.Layer, error) {
		l, err := kvstore.NewLayout(shape, spec, boundary, kvstore.Spec{K: a(8, 32), V: a(8, 32)})
		if err != nil {
			t.Fatal(err)
		}
		l.MaxKVSize = maxKV
		return func(*model.Model, int) ([]kvstore.Layer, error) { return kvstore.NewCaches(shape, l) }
	}
	kinds := []struct {
		name string
		kv   func(*model.Model, int) ([]kvstore.Layer, error)
	}{
		{"fp16", base.kv},
		{"K8/V4 boundary 2", layout(kvstore.Spec{K: a(8, 32), V: a(4, 32)}, 2, 0)},
		{"q4_0", layout(kvstore.Spec{K: kvstore.FormatQ4_0, V: kvstore.FormatQ4_0}, 0, 0)},
		{"rotating 350", layout(kvstore.Spec{K: a(8, 32), V: a(8, 32)}, 0, 350)},
	}
	r := rand.New(rand.NewPCG(3, 4))
	words := func(n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(r.IntN(20000))
		}
		return out
	}
	turn1 := words(300)
	turn2 := append(slices.Clone(turn1), words(220)...)
	turn3 := append(slices.Clone(turn2), words(30)...)
	o := Greedy()
	o.NumPredict = 8
	o.NumBatch = 128
	gen := func(e *Engine, prompt []int32) *Result {
		t.Helper()
		res, err := e.GenerateTokens(context.Background(), prompt, o, func(int32) (bool, error) { return false, nil })
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			ref := *base
			ref.kv = k.kv
			cacheDir := t.TempDir()
			open := func() *Engine {
				pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: cacheDir, Log: quietLog()})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { pc.Close() })
				e := ref
				e.prefix = newPrefixEngine(pc, dir, quietLog())
				return &e
			}
			e := open()
			check := func(e *Engine, prompt []int32, wantCached, wantDisk int) {
				t.Helper()
				got, want := gen(e, prompt), gen(&ref, prompt)
				if !slices.Equal(got.Tokens, want.Tokens) {
					t.Fatalf("%d-token prompt with %d cached tokens: %v, cold %v", len(prompt), got.Prefix.Cached, got.Tokens, want.Tokens)
				}
				if st := got.Prefix; st.Cached != wantCached || st.DiskHits != wantDisk || st.Prefilled != len(prompt)-wantCached {
					t.Fatalf("%d-token prompt: %+v, want %d cached, %d blocks from SSD", len(prompt), *st, wantCached, wantDisk)
				}
			}
			check(e, turn1, 0, 0)
			check(e, turn2, len(turn1)-1, 0) // RAM: the first turn's prompt
			e.prefix.cache.Close()           // the SSD writer finishes
			e = open()                       // a restart: RAM empty
			check(e, turn3, len(turn2)-1, 3) // SSD: two full blocks and the partial at turn2's end
			check(e, turn3, len(turn3)-1, 0) // RAM again, its own prompt
		})
	}
}

// TestPrefixCacheHybridAndSliding: the same for a hybrid model (Qwen3-Next: recurrent
// states in linear-attention layers, resumed only where a prompt ended) and a model with
// sliding-window layers (Gemma 3, window 8), gpt-oss (sliding and full layers with
// attention sinks) and Gemma 4 (sliding layers, full layers of their own head size,
// KV-shared layers that the prefix cache does not store), all random, with the KV
// policy's caches (nil for linear-attention and KV-shared layers, filled by the model)
// and the model's own.
func TestPrefixCacheHybridAndSliding(t *testing.T) {
	for _, be := range testBackends() {
		t.Run(be.name, func(t *testing.T) { prefixCacheHybridAndSliding(t, be) })
	}
}

func prefixCacheHybridAndSliding(t *testing.T, be testBackend) {
	for _, arch := range []struct {
		name string
		cfg  randmodel.Config
	}{{"qwen3_next", randmodel.TinyQwen3Next(256)}, {"gemma3", randmodel.TinyGemma3(256)}, {"gpt_oss", randmodel.TinyGptOss(256)},
		{"gemma4", randmodel.TinyGemma4(256)}, {"gemma4_moe", randmodel.TinyGemma4MoE(256)},
		{"mistral", randmodel.TinyMistral(256)}, {"mistral3", randmodel.TinyMistral3(256)}, {"phi3", randmodel.TinyPhi3(256)}} {
		t.Run(arch.name, func(t *testing.T) {
			dir := t.TempDir()
			hf, mlx := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
			if err := randmodel.Generate(hf, arch.cfg, randmodel.Options{Seed: 5}); err != nil {
				t.Fatal(err)
			}
			if _, err := create.Convert(context.Background(), hf, mlx, create.Options{GroupSize: 32}); err != nil {
				t.Fatal(err)
			}
			base, err := be.load(t, mlx, LoadOptions{Logger: quietLog(), Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer base.Close()
			cfg, _ := os.ReadFile(filepath.Join(mlx, "config.json"))
			shape, err := kvstore.ShapeFromConfig(cfg, base.Model.WeightBytes())
			if err != nil {
				t.Fatal(err)
			}
			layout, err := kvstore.NewLayout(shape, kvstore.SpecF16, 0, kvstore.SpecF16)
			if err != nil {
				t.Fatal(err)
			}
			policy := func(*model.Model, int) ([]kvstore.Layer, error) { return kvstore.NewCaches(shape, layout) }
			r := rand.New(rand.NewPCG(5, 6))
			words := func(n int) []int32 {
				out := make([]int32, n)
				for i := range out {
					out[i] = int32(r.IntN(256))
				}
				return out
			}
			turn1 := words(300)
			turn2 := append(slices.Clone(turn1), words(60)...)
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
			for _, kv := range []struct {
				name string
				kv   func(*model.Model, int) ([]kvstore.Layer, error)
			}{{"policy caches", policy}, {"model caches", base.kv}} {
				ref := *base
				ref.kv = kv.kv
				pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: t.TempDir(), Log: quietLog()})
				if err != nil {
					t.Fatal(err)
				}
				e := ref
				e.prefix = newPrefixEngine(pc, mlx, quietLog())
				for i, c := range []struct {
					prompt []int32
					cached int
				}{{turn1, 0}, {turn2, len(turn1) - 1}, {turn2, len(turn2) - 1}} {
					got, want := gen(&e, c.prompt), gen(&ref, c.prompt)
					if !slices.Equal(got.Tokens, want.Tokens) {
						t.Fatalf("%s, request %d: %v, cold %v", kv.name, i, got.Tokens, want.Tokens)
					}
					if got.Prefix.Cached != c.cached {
						t.Fatalf("%s, request %d: %+v, want %d cached", kv.name, i, *got.Prefix, c.cached)
					}
				}
				pc.Close()
			}
		})
	}
}
