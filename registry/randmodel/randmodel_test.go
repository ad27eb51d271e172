package randmodel

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry/safetensors"
)

// dirHash hashes every file of dir (names and contents).
func dirHash(t *testing.T, dir string) [32]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		h.Write([]byte(e.Name()))
		h.Write(b)
	}
	return [32]byte(h.Sum(nil))
}

func TestDeterministicAcrossCPUs(t *testing.T) {
	cfg := Tiny("qwen3", 1000)
	cfg.DType = "bfloat16"
	a, b, c := t.TempDir(), t.TempDir(), t.TempDir()
	if err := Generate(a, cfg, Options{Seed: 7}); err != nil {
		t.Fatal(err)
	}
	prev := runtime.GOMAXPROCS(1)
	err := Generate(b, cfg, Options{Seed: 7})
	runtime.GOMAXPROCS(prev)
	if err != nil {
		t.Fatal(err)
	}
	if dirHash(t, a) != dirHash(t, b) {
		t.Fatal("the same seed gave different files with 1 and many CPUs")
	}
	if err := Generate(c, cfg, Options{Seed: 8}); err != nil {
		t.Fatal(err)
	}
	if dirHash(t, a) == dirHash(t, c) {
		t.Fatal("different seeds gave identical files")
	}
}

func TestShapesAndValues(t *testing.T) {
	for _, arch := range []string{"llama", "qwen2", "qwen3"} {
		t.Run(arch, func(t *testing.T) {
			cfg := Tiny(arch, 512)
			cfg.HeadDim = 48 // not hidden/heads, as Qwen3 allows
			dir := t.TempDir()
			if err := Generate(dir, cfg, Options{Seed: 1}); err != nil {
				t.Fatal(err)
			}
			ck, err := safetensors.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			want := map[string][]int{
				"model.embed_tokens.weight":                      {512, 128},
				"model.layers.1.self_attn.q_proj.weight":         {4 * 48, 128},
				"model.layers.1.self_attn.k_proj.weight":         {2 * 48, 128},
				"model.layers.1.self_attn.o_proj.weight":         {128, 4 * 48},
				"model.layers.0.mlp.down_proj.weight":            {128, 256},
				"model.layers.0.post_attention_layernorm.weight": {128},
				"lm_head.weight":                                 {512, 128},
			}
			switch arch {
			case "qwen2":
				want["model.layers.0.self_attn.k_proj.bias"] = []int{96}
			case "qwen3":
				want["model.layers.0.self_attn.q_norm.weight"] = []int{48}
			}
			for name, shape := range want {
				tn, ok := ck.Tensor(name)
				if !ok {
					t.Fatalf("missing %s (have %v)", name, ck.Names())
				}
				if !slices.Equal(tn.Shape, shape) || tn.DType != safetensors.F32 {
					t.Fatalf("%s: %s %v, want F32 %v", name, tn.DType, tn.Shape, shape)
				}
			}
			if int64(len(ck.Names())) != int64(len(cfg.Tensors())) {
				t.Fatalf("%d tensors written, %d specified", len(ck.Names()), len(cfg.Tensors()))
			}
			_, hasBias := ck.Tensor("model.layers.0.self_attn.q_proj.bias")
			_, hasQNorm := ck.Tensor("model.layers.0.self_attn.q_norm.weight")
			if hasBias != (arch == "qwen2") || hasQNorm != (arch == "qwen3") {
				t.Fatalf("%s: q bias %v, q norm %v", arch, hasBias, hasQNorm)
			}

			// Statistics: uniform in center ± scale has mean center, sd scale/sqrt(3).
			check := func(name string, mean, sd float64) {
				tn, _ := ck.Tensor(name)
				v, err := tn.Float32s()
				if err != nil {
					t.Fatal(err)
				}
				var s, s2 float64
				for _, x := range v {
					s += float64(x)
				}
				m := s / float64(len(v))
				for _, x := range v {
					s2 += (float64(x) - m) * (float64(x) - m)
				}
				d := math.Sqrt(s2 / float64(len(v)))
				if math.Abs(m-mean) > 4*sd/math.Sqrt(float64(len(v)))+1e-9 || math.Abs(d-sd)/sd > 0.05 {
					t.Fatalf("%s: mean %.4f sd %.4f, want %.4f and %.4f", name, m, d, mean, sd)
				}
			}
			check("model.layers.0.mlp.down_proj.weight", 0, 1/math.Sqrt(256))
			check("model.embed_tokens.weight", 0, 0.1/math.Sqrt(3))
			check("model.norm.weight", 1, 0.2/math.Sqrt(3))

			var cj map[string]any
			raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
			if err := json.Unmarshal(raw, &cj); err != nil {
				t.Fatal(err)
			}
			if cj["model_type"] != arch || cj["head_dim"] != 48.0 || cj["vocab_size"] != 512.0 {
				t.Fatalf("config.json: %v", cj)
			}
		})
	}
}

func TestSharded(t *testing.T) {
	cfg := Tiny("llama", 300)
	cfg.TieWordEmbeddings = true
	one, many := t.TempDir(), t.TempDir()
	if err := Generate(one, cfg, Options{Seed: 3}); err != nil {
		t.Fatal(err)
	}
	if err := Generate(many, cfg, Options{Seed: 3, MaxShardBytes: 300 << 10}); err != nil {
		t.Fatal(err)
	}
	shards, _ := filepath.Glob(filepath.Join(many, "model-*-of-*.safetensors"))
	if len(shards) < 2 {
		t.Fatalf("expected several shards, got %v", shards)
	}
	if _, err := os.Stat(filepath.Join(many, safetensors.IndexFile)); err != nil {
		t.Fatal(err)
	}
	a, err := safetensors.OpenDir(one)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := safetensors.OpenDir(many)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !slices.Equal(a.Names(), b.Names()) {
		t.Fatalf("names differ: %v vs %v", a.Names(), b.Names())
	}
	da, err := Digest(one)
	if err != nil {
		t.Fatal(err)
	}
	if db, _ := Digest(many); db != da {
		t.Fatal("the same weights in one file and in shards have different digests")
	}
	other := t.TempDir()
	Generate(other, cfg, Options{Seed: 4})
	if dc, _ := Digest(other); dc == da {
		t.Fatal("different weights have the same digest")
	}
	if _, ok := a.Tensor("lm_head.weight"); ok {
		t.Fatal("tied model has lm_head.weight")
	}
	for _, n := range a.Names() {
		x, _ := a.Tensor(n)
		y, _ := b.Tensor(n)
		if !bytes.Equal(x.Data, y.Data) {
			t.Fatalf("%s differs between sharded and single-file checkpoints", n)
		}
	}
}

func TestTokenizerAttached(t *testing.T) {
	tok := testdata.Tokenizer(t, "qwen3")
	cfg := Tiny("qwen3", 1000)
	err := Generate(t.TempDir(), cfg, Options{TokenizerDir: tok})
	if err == nil || !strings.Contains(err.Error(), "vocab_size") {
		t.Fatalf("a 1000-token vocabulary accepted the Qwen3 tokenizer: %v", err)
	}
	cfg.VocabSize = 151936
	cfg.HiddenSize, cfg.IntermediateSize = 32, 64
	cfg.HeadDim = 8
	dir := t.TempDir()
	if err := Generate(dir, cfg, Options{TokenizerDir: tok}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json", "model.safetensors"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBadConfig(t *testing.T) {
	bad := []func(*Config){
		func(c *Config) { c.Arch = "gpt2" },
		func(c *Config) { c.DType = "int8" },
		func(c *Config) { c.NumKVHeads = 3 },
		func(c *Config) { c.VocabSize = 0 },
		func(c *Config) { c.HeadDim = 7 },
	}
	for i, f := range bad {
		c := Tiny("llama", 100)
		f(&c)
		if err := Generate(t.TempDir(), c, Options{}); err == nil {
			t.Errorf("bad config %d accepted: %+v", i, c)
		}
	}
}

func TestPresets(t *testing.T) {
	if n := Qwen2_0_5B().NumParams(); n < 490e6 || n > 500e6 {
		t.Fatalf("Qwen2-0.5B shape has %d parameters, want about 494M", n)
	}
	if n := Qwen2_1_5B().NumParams(); n < 1.5e9 || n > 1.6e9 {
		t.Fatalf("Qwen2-1.5B shape has %d parameters, want about 1.54B", n)
	}
}

// BenchmarkQwen2_0_5B measures writing a full 0.5B bf16 checkpoint.
func BenchmarkQwen2_0_5B(b *testing.B) {
	for b.Loop() {
		dir := b.TempDir()
		if err := Generate(dir, Qwen2_0_5B(), Options{Seed: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// A model whose later layers are scaled (TailScale) holds its first layers, embeddings,
// final norm and head exactly as the model of those first layers alone with the same seed
// does, and its later output projections are the unscaled model's times the scale.
func TestTailScale(t *testing.T) {
	cfg := Tiny("qwen3", 300)
	cfg.NumLayers = 4
	full, short, plain := t.TempDir(), t.TempDir(), t.TempDir()
	scaled := cfg
	scaled.TailFrom, scaled.TailScale = 2, 0.25
	head := cfg
	head.NumLayers = 2
	for dir, c := range map[string]Config{full: scaled, short: head, plain: cfg} {
		if err := Generate(dir, c, Options{Seed: 5}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(dir, name string) []float32 {
		ck, err := safetensors.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Close()
		tn, ok := ck.Tensor(name)
		if !ok {
			t.Fatalf("%s: no %s", dir, name)
		}
		v, err := tn.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(v)
	}
	for _, name := range []string{"model.embed_tokens.weight", "model.layers.1.self_attn.o_proj.weight", "model.layers.1.mlp.down_proj.weight", "model.norm.weight", "lm_head.weight"} {
		if !slices.Equal(read(full, name), read(short, name)) {
			t.Errorf("%s differs between the scaled model and its first 2 layers alone", name)
		}
	}
	for _, name := range []string{"model.layers.2.self_attn.o_proj.weight", "model.layers.3.mlp.down_proj.weight"} {
		s, p := read(full, name), read(plain, name)
		for i := range s {
			if math.Abs(float64(s[i]-0.25*p[i])) > 1e-6 {
				t.Fatalf("%s[%d] = %v, want 0.25 × %v", name, i, s[i], p[i])
			}
		}
	}
	if a, b := read(full, "model.layers.3.mlp.up_proj.weight"), read(plain, "model.layers.3.mlp.up_proj.weight"); !slices.Equal(a, b) {
		t.Error("an input projection of a scaled layer was scaled")
	}
}

// TestRoutingScale: Routing picks the embeddings' scale (RoutingScales) unless
// EmbeddingScale sets it; an unknown name is refused.
func TestRoutingScale(t *testing.T) {
	embed := func(c Config) float32 {
		for _, ts := range c.Tensors() {
			if ts.Name == "model.embed_tokens.weight" {
				return ts.scale
			}
		}
		return 0
	}
	c := TinyMoE(256)
	if got := embed(c); got != 0.1 {
		t.Errorf("default scale %v", got)
	}
	c.Routing = "qwen"
	if got := embed(c); got != float32(RoutingScales["qwen"]) {
		t.Errorf("qwen scale %v", got)
	}
	c.EmbeddingScale = 2
	if got := embed(c); got != 2 {
		t.Errorf("EmbeddingScale beside Routing: %v", got)
	}
	c.Routing = "zipf"
	if err := c.Validate(); err == nil {
		t.Error("an unknown routing passed Validate")
	}
}
