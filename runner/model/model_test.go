package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	_ "github.com/mlxg/mlxg/runner/model/all"
	"github.com/mlxg/mlxg/text/tokenizer"
)

func generate(t *testing.T, cfg randmodel.Config) string {
	t.Helper()
	dir := t.TempDir()
	if err := randmodel.Generate(dir, cfg, randmodel.Options{Seed: 7}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func load(t *testing.T, dir string) *model.Model {
	t.Helper()
	m, err := model.Load(dir, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func maxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

var prompt = []int32{5, 17, 301, 42, 42, 9, 250, 3, 77, 130, 11, 2}

// TestIncremental: logits from one prefill over every position equal those from a
// shorter prefill followed by single-token decode steps, for every architecture.
func TestIncremental(t *testing.T) {
	for _, arch := range []string{"llama", "qwen2", "qwen3"} {
		cfg := randmodel.Tiny(arch, 512)
		cfg.TieWordEmbeddings = arch == "qwen3"
		dir := t.TempDir()
		// llama in bfloat16 split into shards through an index; qwen2 in float16.
		opts := randmodel.Options{Seed: 7}
		switch arch {
		case "llama":
			cfg.DType, opts.MaxShardBytes = "bfloat16", 200_000
		case "qwen2":
			cfg.DType = "float16"
		}
		if err := randmodel.Generate(dir, cfg, opts); err != nil {
			t.Fatal(err)
		}
		m := load(t, dir)
		if arch == "llama" {
			if _, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); err != nil {
				t.Fatalf("expected a sharded checkpoint: %v", err)
			}
		}
		caches, _ := m.NewCaches(true)
		all, err := m.Forward(context.Background(), prompt, caches, true)
		if err != nil {
			t.Fatal(err)
		}
		V := m.Config.VocabSize
		if len(all) != len(prompt)*V {
			t.Fatalf("%s: %d logits for %d positions", arch, len(all), len(prompt))
		}
		caches, _ = m.NewCaches(true)
		last, err := m.Forward(context.Background(), prompt[:5], caches, false)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxDiff(last, all[4*V:5*V]); d > 1e-4 {
			t.Fatalf("%s: last-position logits differ from the all-position ones by %g", arch, d)
		}
		for i := 5; i < len(prompt); i++ {
			step, err := m.Forward(context.Background(), prompt[i:i+1], caches, false)
			if err != nil {
				t.Fatal(err)
			}
			if d := maxDiff(step, all[i*V:(i+1)*V]); d > 1e-4 {
				t.Fatalf("%s: decode step %d differs from prefill by %g", arch, i, d)
			}
		}
		var spread float64
		for _, v := range all[:V] {
			spread = math.Max(spread, math.Abs(float64(v)))
		}
		if spread < 1e-2 {
			t.Fatalf("%s: logits are all near zero (max %g)", arch, spread)
		}
	}
}

// quantizeDir writes dir's checkpoint MLX-quantized into qdir (every 2-D weight,
// embeddings included; q_proj kept at 8 bits through a per-module override, and
// layer 0's o_proj left in float by a false override), and the same weights
// dequantized, as float32, into fdir.
func quantizeDir(t *testing.T, dir, qdir, fdir string, bits, group int) {
	t.Helper()
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var qts, fts []safetensors.Tensor
	overrides := map[string]any{}
	for _, name := range ck.Names() {
		tn, _ := ck.Tensor(name)
		vals, err := tn.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		module := strings.TrimSuffix(name, ".weight")
		b := bits
		if strings.HasSuffix(module, "q_proj") {
			b = 8
			overrides[module] = map[string]any{"bits": 8, "group_size": group}
		}
		if len(tn.Shape) != 2 || module == "model.layers.0.self_attn.o_proj" {
			if len(tn.Shape) == 2 {
				overrides[module] = false
			}
			qts = append(qts, f32Tensor(name, tn.Shape, vals))
			fts = append(fts, f32Tensor(name, tn.Shape, vals))
			continue
		}
		rows, cols := tn.Shape[0], tn.Shape[1]
		packed, scales, biases, err := quant.Quantize(vals, rows, cols, b, group)
		if err != nil {
			t.Fatal(err)
		}
		deq, _ := quant.Dequantize(packed, scales, biases, rows, cols, b, group)
		qts = append(qts, u32Tensor(name, []int{rows, cols * b / 32}, packed),
			f32Tensor(module+".scales", []int{rows, cols / group}, scales),
			f32Tensor(module+".biases", []int{rows, cols / group}, biases))
		fts = append(fts, f32Tensor(name, tn.Shape, deq))
	}
	var cfg map[string]any
	raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	json.Unmarshal(raw, &cfg)
	for _, d := range []string{qdir, fdir} {
		os.MkdirAll(d, 0o755)
		ts := fts
		c := map[string]any{}
		for k, v := range cfg {
			c[k] = v
		}
		if d == qdir {
			ts = qts
			q := map[string]any{"bits": bits, "group_size": group, "mode": "affine"}
			for k, v := range overrides {
				q[k] = v
			}
			c["quantization"] = q
		}
		if err := safetensors.Write(filepath.Join(d, "model.safetensors"), ts, nil); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(c)
		os.WriteFile(filepath.Join(d, "config.json"), data, 0o644)
	}
}

func f32Tensor(name string, shape []int, v []float32) safetensors.Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		u := math.Float32bits(x)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: safetensors.F32, Shape: shape}, Data: b}
}

func u32Tensor(name string, shape []int, v []uint32) safetensors.Tensor {
	b := make([]byte, 4*len(v))
	for i, u := range v {
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: safetensors.U32, Shape: shape}, Data: b}
}

// TestQuantized: an MLX-quantized checkpoint (with overrides) computes the same logits
// as the float checkpoint of its dequantized weights, through both the decode path
// and the prefill path.
func TestQuantized(t *testing.T) {
	for _, arch := range []string{"qwen2", "llama"} {
		cfg := randmodel.Tiny(arch, 512)
		cfg.TieWordEmbeddings = arch == "qwen2"
		dir := generate(t, cfg)
		qdir, fdir := filepath.Join(t.TempDir(), "q"), filepath.Join(t.TempDir(), "f")
		quantizeDir(t, dir, qdir, fdir, 4, 32)
		qm, fm := load(t, qdir), load(t, fdir)
		if qm.Config.Quantization == nil || qm.Config.Quantization.Default.Bits != 4 {
			t.Fatalf("quantization block not read: %+v", qm.Config.Quantization)
		}
		for _, n := range []int{1, len(prompt)} {
			qc, _ := qm.NewCaches(true)
			fc, _ := fm.NewCaches(true)
			ql, err := qm.Forward(context.Background(), prompt[:n], qc, true)
			if err != nil {
				t.Fatal(err)
			}
			fl, err := fm.Forward(context.Background(), prompt[:n], fc, true)
			if err != nil {
				t.Fatal(err)
			}
			if d := maxDiff(ql, fl); d > 2e-4 {
				t.Fatalf("%s, %d tokens: quantized and dequantized logits differ by %g", arch, n, d)
			}
		}
	}
}

func TestCancel(t *testing.T) {
	m := load(t, generate(t, randmodel.Tiny("qwen3", 512)))
	caches, _ := m.NewCaches(false)
	if _, err := m.Forward(context.Background(), prompt[:3], caches, false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Forward(ctx, prompt, caches, false); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Forward: %v", err)
	}
	for i, c := range caches {
		if c.Len() != 3 {
			t.Fatalf("layer %d cache holds %d positions after a cancelled step, want 3", i, c.Len())
		}
	}
	if _, err := m.Forward(context.Background(), []int32{600}, caches, false); err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Fatalf("out-of-vocabulary token: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := generate(t, randmodel.Tiny("llama", 512))
	raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	var c map[string]any
	json.Unmarshal(raw, &c)
	edit := func(key string, value any) { // edits accumulate
		c[key] = value
		data, _ := json.Marshal(c)
		os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
	}
	edit("model_type", "gpt2")
	_, err := model.Load(dir, cpu.New(1))
	if err == nil || !strings.Contains(err.Error(), `"gpt2"`) || !strings.Contains(err.Error(), "llama, ministral3, mistral, mistral3, phi3, qwen2, qwen3") {
		t.Fatalf("unsupported model_type: %v", err)
	}
	edit("model_type", "mistral")
	edit("sliding_window", 4096)
	edit("layer_types", []string{"sliding_attention", "attention"})
	if _, err := model.Load(dir, cpu.New(1)); err == nil || !strings.Contains(err.Error(), `layer type "attention"`) {
		t.Fatalf("mistral with a bad layer type: %v", err)
	}
	delete(c, "layer_types")
	edit("model_type", "llama")
	delete(c, "sliding_window")
	edit("intermediate_size", 200)
	if _, err := model.Load(dir, cpu.New(1)); err == nil || !strings.Contains(err.Error(), "gate_proj.weight is 256×128, the config implies 200×128") {
		t.Fatalf("wrong shape: %v", err)
	}
}

// TestArchErrors: what an architecture cannot run is refused when it loads.
func TestArchErrors(t *testing.T) {
	dir := generate(t, randmodel.Tiny("qwen2", 512))
	raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	var c map[string]any
	json.Unmarshal(raw, &c)
	c["use_sliding_window"] = true
	data, _ := json.Marshal(c)
	os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
	if _, err := model.Load(dir, cpu.New(1)); err == nil || !strings.Contains(err.Error(), "use_sliding_window") {
		t.Fatalf("qwen2 with use_sliding_window: %v", err)
	}
	// A llama checkpoint relabelled qwen3 lacks q_norm: the error names the tensor.
	dir = generate(t, randmodel.Tiny("llama", 512))
	raw, _ = os.ReadFile(filepath.Join(dir, "config.json"))
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(strings.Replace(string(raw), `"llama"`, `"qwen3"`, 1)), 0o644)
	if _, err := model.Load(dir, cpu.New(1)); err == nil || !strings.Contains(err.Error(), "q_norm.weight") {
		t.Fatalf("qwen3 without q_norm: %v", err)
	}
}

// TestQwen3Tiny runs the real trained model: its greedy continuation of an English
// prompt must be English words (transformers' exact tokens are pinned elsewhere).
func TestQwen3Tiny(t *testing.T) {
	dir := testdata.SharedModel(t, "qwen3-tiny")
	m := load(t, dir)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	caches, _ := m.NewCaches(false)
	logits, err := m.Forward(context.Background(), tok.Encode("The sun was shining and the children went out to", false), caches, false)
	var out []int32
	for i := 0; i < 24 && err == nil; i++ {
		best := 0
		for j, v := range logits {
			if v > logits[best] {
				best = j
			}
		}
		out = append(out, int32(best))
		logits, err = m.Forward(context.Background(), []int32{int32(best)}, caches, false)
	}
	if err != nil {
		t.Fatal(err)
	}
	text := tok.Decode(out, true)
	letters := 0
	for _, r := range text {
		if r == ' ' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			letters++
		}
	}
	words := strings.Fields(text)
	if len(words) < 8 || float64(letters) < 0.85*float64(len([]rune(text))) {
		t.Fatalf("greedy continuation does not read as English: %q", text)
	}
	t.Logf("continuation: %q", text)
}

func TestSupported(t *testing.T) {
	got := fmt.Sprint(model.Supported())
	for _, want := range []string{"llama", "mistral", "qwen2", "qwen3"} {
		if !strings.Contains(got, want) {
			t.Errorf("Supported() = %s, missing %s", got, want)
		}
	}
}

var _ kvstore.Layer = (*kvstore.Full)(nil)
