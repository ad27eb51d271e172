package gemma3_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

func load(t *testing.T, bits int) (*model.Model, string) {
	t.Helper()
	dir := t.TempDir()
	hf, mlx := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	if err := randmodel.Generate(hf, randmodel.TinyGemma3(256), randmodel.Options{Seed: 6}); err != nil {
		t.Fatal(err)
	}
	if bits > 0 {
		if _, err := create.Convert(context.Background(), hf, mlx, create.Options{Bits: bits, GroupSize: 32}); err != nil {
			t.Fatal(err)
		}
		hf = mlx
	}
	m, err := model.Load(hf, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, hf
}

// TestSlidingWindowChunks: a prompt three times the window, in one pass and in chunks
// of 1 and 5, through the model's own caches (rotating on sliding layers).
func TestSlidingWindowChunks(t *testing.T) {
	m, _ := load(t, 0)
	p := modeltest.Tokens(4, 24)
	caches, err := m.NewCaches(true)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := caches[0].(*kvstore.Rotating); !ok {
		t.Fatalf("layer 0 (sliding) has a %T cache", caches[0])
	}
	if _, ok := caches[1].(*kvstore.Full); !ok {
		t.Fatalf("layer 1 (global) has a %T cache", caches[1])
	}
	want := modeltest.Forward(t, m, caches, p, len(p))
	for _, chunk := range []int{1, 5} {
		caches, _ := m.NewCaches(true)
		if r := modeltest.MaxRel(modeltest.Forward(t, m, caches, p, chunk), want); r > 1e-5 {
			t.Errorf("chunks of %d differ from one pass by %.3g", chunk, r)
		}
	}
	// A cache that keeps every position on a sliding layer is refused past the window.
	full := make([]kvstore.Layer, len(caches))
	for i := range full {
		full[i], _ = kvstore.NewFull(1, 32, 32, true)
	}
	if _, err := m.Forward(context.Background(), p, full, false); err == nil {
		t.Error("full-attention caches on sliding layers were accepted past the window")
	}
}

// TestQuantizedKV: the KV policy's caches for this model (rotating on sliding layers,
// quantized K8/V4 with 8-bit boundary layers, converted from fp16 after 4 positions),
// on 4-bit weights, run a chunked prefill and decode steps without error and stay
// close to the fp16 caches.
func TestQuantizedKV(t *testing.T) {
	m, dir := load(t, 4)
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	shape, err := kvstore.ShapeFromConfig(raw, m.WeightBytes())
	if err != nil {
		t.Fatal(err)
	}
	base := kvstore.Spec{K: kvstore.AffineFormat(8, 32), V: kvstore.AffineFormat(4, 32)}
	layout, err := kvstore.NewLayout(shape, base, 1, kvstore.Spec{K: kvstore.AffineFormat(8, 32), V: kvstore.AffineFormat(8, 32)})
	if err != nil {
		t.Fatal(err)
	}
	layout.QuantizedKVStart = 4
	p := modeltest.Tokens(4, 30)
	q, err := kvstore.NewCaches(shape, layout)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := m.NewCaches(false)
	got := modeltest.Forward(t, m, q, p[:20], 6)
	got = append(got, modeltest.Forward(t, m, q, p[20:], 1)...)
	want := modeltest.Forward(t, m, ref, p, 7)
	if r := modeltest.MaxRel(got, want); r > 0.1 || math.IsNaN(r) {
		t.Errorf("quantized KV logits differ from fp16 by %.3g", r)
	} else {
		t.Logf("quantized KV vs fp16: relative difference %.3g", r)
	}
}

// TestMultimodalLayout: the same weights as a multimodal Gemma 3 checkpoint (model_type
// gemma3, text_config, language_model.* keys, a vision tower tensor to ignore) give
// the text model's logits.
func TestMultimodalLayout(t *testing.T) {
	m, dir := load(t, 0)
	dst := t.TempDir()
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var ts []safetensors.Tensor
	for _, name := range ck.Names() {
		tt, _ := ck.Tensor(name)
		ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: "language_model." + name, DType: tt.DType, Shape: tt.Shape}, Data: tt.Data})
	}
	ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: "vision_tower.patch.weight", DType: safetensors.F32, Shape: []int{2}}, Data: make([]byte, 8)})
	if err := safetensors.Write(filepath.Join(dst, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	var text map[string]any
	json.Unmarshal(raw, &text)
	cfg, _ := json.Marshal(map[string]any{"model_type": "gemma3", "architectures": []string{"Gemma3ForConditionalGeneration"}, "text_config": text})
	os.WriteFile(filepath.Join(dst, "config.json"), cfg, 0o644)
	mm, err := model.Load(dst, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	defer mm.Close()
	p := modeltest.Tokens(4, 12)
	a, _ := m.NewCaches(true)
	b, _ := mm.NewCaches(true)
	if r := modeltest.MaxRel(modeltest.Forward(t, mm, b, p, 12), modeltest.Forward(t, m, a, p, 12)); r > 1e-6 {
		t.Errorf("the multimodal layout's logits differ by %.3g", r)
	}
}
