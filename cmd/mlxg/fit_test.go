package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/model"
)

func runFit(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newFitCmd()
	var out strings.Builder
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestFitQwen3Tiny(t *testing.T) {
	dir := testdata.SharedModel(t, "qwen3-tiny")
	out, err := runFit(t, dir, "--ctx", "2048", "--total", "16GiB", "--available", "8GiB")
	if err != nil {
		t.Fatal(err)
	}
	// qwen3-tiny: 6 layers, 2 KV heads × 64. fp16: 6×2×(128+128) = 3072 B per token.
	// Chosen K6h/V6h g64: 6 layers × 2 × (52+52) = 1248 B.
	// q4_0: 6 × 2 × 2 × 36 = 864 B.
	for _, want := range []string{
		"6 layers: 6 full attention (2 KV heads × 64), max context 4096",
		"fp16 ", "3.0 KiB", "K6h/V6h g64, 6 of 6 layers with KV (step 1, chosen)", "1.2 KiB", "41%", "(step 3)",
		"q4_0 ", "864 B", "28%",
		"total 16 GiB, available 8.0 GiB",
		"normal    K6h/V6h g64, 6 of 6 layers with KV                     1.2 KiB       0.41x    98.9%          5.7e-04",
		"warn      K4/V4 g64/32, boundary 2@6h/6h, 6 of 6 layers with KV  1.1 KiB       0.37x    95.6%          5.4e-03",
		"measured against an fp16 cache on qwen3-tiny",
		"critical  refused",
		"At critical pressure: memory pressure is critical",
		"Now (normal pressure): context 2048",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestFitHybridDir(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"model_type":"qwen3_next","num_hidden_layers":8,"num_attention_heads":16,"num_key_value_heads":2,"head_dim":256,
		"full_attention_interval":4,"linear_num_key_heads":16,"linear_num_value_heads":32,"linear_key_head_dim":128,
		"linear_value_head_dim":128,"linear_conv_kernel_dim":4,"max_position_embeddings":262144}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	w := safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: "w", DType: "F16", Shape: []int{1024, 512}}, Data: make([]byte, 1024*512*2)}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), []safetensors.Tensor{w}, nil); err != nil {
		t.Fatal(err)
	}
	out, err := runFit(t, dir, "--total", "64GB", "--available", "32GB", "--kv-bits", "(8, 4)", "--kv-boundary-layers", "1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"8 layers: 2 full attention, 6 recurrent (2 KV heads × 256), max context 262144",
		"Weights   1.0 MiB",
		"K8/V4 g64/32, boundary 1@8/8, 2 of 8 layers with KV (step 1, chosen)",
		"normal    K8/V4 g64/32, boundary 1@8/8, 2 of 8 layers with KV  2.2 KiB       0.55x    -              -        262144",
		"spec set by kv-bits from --kv-bits",
		"not measured for layouts your KV settings make",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestFitErrors(t *testing.T) {
	dir := testdata.SharedModel(t, "qwen3-tiny")
	for _, args := range [][]string{
		{dir, "--kv-bits", "7"},
		{dir, "--ctx", "-1"},
		{dir, "--total", "lots"},
		{filepath.Join(t.TempDir(), "..", "nothing-here")},
	} {
		if _, err := runFit(t, args...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	t.Setenv("MLXG_KV_BITS", "9")
	if _, err := runFit(t, dir); err == nil || !strings.Contains(err.Error(), "MLXG_KV_BITS") {
		t.Errorf("bad MLXG_KV_BITS: %v", err)
	}
}

// TestFitLatentDir: GLM-4.7-Flash's latent layers count the latent and the rotary key
// per token (512 + 64 values a layer), not expanded per-head keys and values.
func TestFitLatentDir(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"model_type":"glm4_moe_lite","num_hidden_layers":47,"num_attention_heads":20,"num_key_value_heads":20,"hidden_size":2048,
		"kv_lora_rank":512,"q_lora_rank":768,"qk_rope_head_dim":64,"qk_nope_head_dim":192,"v_head_dim":256,"max_position_embeddings":202752}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	w := safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: "w", DType: "F16", Shape: []int{1024, 512}}, Data: make([]byte, 1024*512*2)}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), []safetensors.Tensor{w}, nil); err != nil {
		t.Fatal(err)
	}
	out, err := runFit(t, dir, "--total", "64GB", "--available", "32GB", "--kv-bits", "16")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"47 layers: 47 latent attention (1 KV heads × 64/512), max context 202752",
		"fp16, 47 of 47 layers with KV  53 KiB        1.00x", // 47 × (64 + 512) × 2 bytes a token
		"Now (normal pressure): context 202752, KV 10 GiB",   // the whole context fits in 32 GB
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestFitVision: a checkpoint with a vision tower shows the tower's weights and what encoding images
// takes, and its plan's peak counts them (the same checkpoint without its preprocessor_config.json
// reads text only and plans less).
func TestFitVision(t *testing.T) {
	dir := t.TempDir()
	v := randmodel.TinyQwenVision()
	if err := randmodel.GenerateQwen35(dir, randmodel.TinyQwen3Next(1000), nil, randmodel.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if err := randmodel.AddQwenVision(dir, v, 1); err != nil {
		t.Fatal(err)
	}
	vm, err := model.VisionMemoryOf(dir)
	if err != nil || vm.Weights <= 0 || vm.MaxPatches != 4096 || vm.Encode <= 0 || vm.Features <= 0 {
		t.Fatalf("%+v, %v", vm, err)
	}
	args := []string{dir, "--ctx", "2048", "--total", "16GiB", "--available", "8GiB"}
	out, err := runFit(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("Vision    tower weights %s (part of the weights); images: %s to encode the largest (4,096 patches) and %s of kept features",
		ibytes(vm.Weights), ibytes(vm.Encode), ibytes(vm.Features))
	if !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	withVision, err := readShape(dir)
	if err != nil || withVision.Vision != vm.Activations() {
		t.Fatalf("shape's vision %d, want %d (%v)", withVision.Vision, vm.Activations(), err)
	}
	// Memory for the model and half the pixel budget's activations, not the whole budget's.
	text := withVision
	text.Vision = 0
	p0, err := kvstore.Choose(kvstore.PolicyInput{Model: text, NumCtx: 2048, Memory: sysmem.Info{Total: 16 << 30, Available: 8 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	half, err := model.VisionMemoryFor(dir, vm.MaxPixels/2)
	if err != nil {
		t.Fatal(err)
	}
	tight := p0.Peak() + p0.Reserve + (vm.Activations()+half.Activations())/2
	out, err = runFit(t, dir, "--ctx", "2048", "--total", "16GiB", "--available", fmt.Sprint(tight))
	if want := "that does not fit now: serve resizes images within 32,768 pixels instead of 65,536 (2,048 patches"; err != nil || !strings.Contains(out, want) {
		t.Errorf("tight memory: %v; output lacks %q:\n%s", err, want, out)
	}
	if err := os.Remove(filepath.Join(dir, "preprocessor_config.json")); err != nil {
		t.Fatal(err)
	}
	textOnly, err := readShape(dir)
	if err != nil || textOnly.Vision != 0 {
		t.Fatalf("without a preprocessor: vision %d (%v)", textOnly.Vision, err)
	}
	if out, err := runFit(t, args...); err != nil || strings.Contains(out, "Vision ") {
		t.Errorf("a text-only checkpoint: %v\n%s", err, out)
	}
}
