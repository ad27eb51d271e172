package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
)

// TestFitStreaming: with MLXG_WEIGHT_BUDGET, fit says what a mixture-of-experts model
// keeps in memory in streaming mode and the hit rates to expect; a bad value is an error.
func TestFitStreaming(t *testing.T) {
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	if err := randmodel.Generate(hf, randmodel.TinyMoE(256), randmodel.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	got, err := runFit(t, out, "--ctx", "2048", "--total", "16GiB", "--available", "8GiB")
	if err != nil || !strings.Contains(got, "they fit in memory, so they are mapped") {
		t.Errorf("without a budget (%v):\n%s", err, got)
	}
	t.Setenv("MLXG_WEIGHT_BUDGET", "300KB")
	got, err = runFit(t, out, "--ctx", "2048", "--total", "16GiB", "--available", "8GiB")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Streaming (MLXG_WEIGHT_BUDGET): 293 KiB of", "an expert cache of", "expected expert-cache hit rate (frequency policy, simulated)", "Qwen3-like routing",
		"expected reads per token:"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	t.Setenv("MLXG_WEIGHT_BUDGET", "lots")
	if _, err := runFit(t, out); err == nil || !strings.Contains(err.Error(), "MLXG_WEIGHT_BUDGET") {
		t.Errorf("a bad budget: %v", err)
	}
}

func TestPrintPsStreaming(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ps := &api.ProcessResponse{Models: []api.ProcessModelResponse{
		{Name: "qwen3-moe", Digest: "0123456789abcdef", Size: 2_300_000_000, ContextLength: 4096, KVCache: "fp16", ExpiresAt: now.Add(time.Minute),
			Streaming: &api.ProcessStreaming{Resident: 2_100_000_000, Weights: 5_960_000_000, Hits: 90, Misses: 10, HitRate: 0.9}},
	}}
	var b bytes.Buffer
	if err := printPs(&b, ps, now); err != nil {
		t.Fatal(err)
	}
	if want := "qwen3-moe streaming: 2.1 of 6.0 GB resident (expert cache hit rate 90%)"; !strings.Contains(b.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, b.String())
	}
}

// TestFitStreamingDense: with MLXG_WEIGHT_BUDGET, fit says how many of a dense model's
// layers streaming mode keeps and what it reads per token.
func TestFitStreamingDense(t *testing.T) {
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	cfg := randmodel.Tiny("llama", 256)
	cfg.NumLayers = 8
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	got, err := runFit(t, out, "--ctx", "2048", "--total", "16GiB", "--available", "8GiB")
	if err != nil || !strings.Contains(got, "Streaming layers are") || !strings.Contains(got, "they fit in memory, so they are mapped") {
		t.Errorf("without a budget (%v):\n%s", err, got)
	}
	t.Setenv("MLXG_WEIGHT_BUDGET", "300KB")
	got, err = runFit(t, out, "--ctx", "2048", "--total", "16GiB", "--available", "8GiB")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Streaming layers (MLXG_WEIGHT_BUDGET): 293 KiB of", "layers kept", "read from disk per token"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestPrintPsStreamingDense(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ps := &api.ProcessResponse{Models: []api.ProcessModelResponse{
		{Name: "llama-8b", Digest: "0123456789abcdef", Size: 2_300_000_000, ContextLength: 4096, KVCache: "fp16", ExpiresAt: now.Add(time.Minute),
			Streaming: &api.ProcessStreaming{Resident: 2_100_000_000, Weights: 3_000_000_000, Hits: 70, Misses: 30, HitRate: 0.7, Layers: 32, KeptLayers: 21}},
	}}
	var b bytes.Buffer
	if err := printPs(&b, ps, now); err != nil {
		t.Fatal(err)
	}
	if want := "llama-8b streaming: 2.1 of 3.0 GB resident, 21 of 32 layers kept (layer hit rate 70%)"; !strings.Contains(b.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, b.String())
	}
}
