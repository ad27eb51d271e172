package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/residency"
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

// TestFitStreamingDecodeLoan: under a memory cgroup's limit (sysmem's Limited) the plan
// lends the prompt passes' activation room to the expert cache while decoding, and fit
// counts it: the decode cache is the budget's plus the loan, the hit rates and reads
// per token are the larger cache's (here every expert fits: nothing is read), and the
// rates without the loan are given beside them. Without a limit, or with GOMEMLIMIT,
// nothing is lent and the lines are the budget's alone.
func TestFitStreamingDecodeLoan(t *testing.T) {
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	if err := randmodel.Generate(hf, randmodel.TinyMoE(256), randmodel.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	shape, err := readShape(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("MLXG_WEIGHT_BUDGET", "300KB")
	t.Setenv("GOMEMLIMIT", "")
	fit := func(limited bool) string {
		mem := sysmem.Info{Total: 16 << 30, Available: 8 << 30, Source: "given", Limited: limited}
		var b strings.Builder
		streamed, err := printStreaming(&b, out, shape, mem, 2048, kvstore.Options{}, false)
		if err != nil || !streamed {
			t.Fatalf("limited %v: streamed %v, %v:\n%s", limited, streamed, err, b.String())
		}
		return b.String()
	}
	got := fit(true)
	t.Logf("under a limit:\n%s", got)
	// The loan (193 KiB) and the budget's cache (95 KiB) hold all 288 KiB of experts: the
	// decode rates are the simulation's with every expert cached (its misses are the
	// first uses), the rates without the loan those of the budget's third.
	layers, n, k, ok := moeShape(out)
	if !ok {
		t.Fatal("no MoE shape")
	}
	rate := func(share float64, r residency.Routing) int {
		return int(math.Round(100 * residency.ExpectedHitRate(layers, n, k, share, r, residency.Frequency)))
	}
	all := fmt.Sprintf("%d%% with Qwen3-like routing, %d%% with near-uniform routing", rate(1, residency.QwenLike), rate(1, residency.NearUniform))
	shareOf := 95.0 / 288
	if !strings.Contains(got, "an expert cache of 95 KiB, 33% of the 288 KiB of experts") {
		t.Fatalf("the budget's cache is not 95 KiB of 288 (the test's shares assume it):\n%s", got)
	}
	if q, u := rate(shareOf, residency.QwenLike), rate(shareOf, residency.NearUniform); q >= rate(1, residency.QwenLike) || u >= rate(1, residency.NearUniform) {
		t.Fatalf("the loan would change no hit rate (%d%%, %d%% without it): nothing to check", q, u)
	}
	for _, want := range []string{"while decoding on the CPU backend, an expert cache of 288 KiB, 100% of the experts", "(193 KiB) is lent to it",
		"expected expert-cache hit rate (frequency policy, simulated): " + all,
		fmt.Sprintf("without the loan (on MLX): %d%% / %d%% hits", rate(shareOf, residency.QwenLike), rate(shareOf, residency.NearUniform))} {
		if !strings.Contains(got, want) {
			t.Errorf("under a limit, the output lacks %q:\n%s", want, got)
		}
	}
	noLoan := fit(false)
	if !strings.Contains(noLoan, fmt.Sprintf("simulated): %d%% with Qwen3-like routing", rate(shareOf, residency.QwenLike))) {
		t.Errorf("without a limit, the hit rate is not the budget's cache's:\n%s", noLoan)
	}
	reads := func(s string) string { // the expected reads line
		i := strings.Index(s, "expected reads per token: ")
		if i < 0 {
			t.Fatalf("no reads line:\n%s", s)
		}
		return s[i : i+strings.IndexByte(s[i:], '\n')]
	}
	if reads(got) == reads(noLoan) {
		t.Errorf("the loan changed no read per token: %q", reads(got))
	}
	for name, out := range map[string]string{"no limit": fit(false), "GOMEMLIMIT": func() string { t.Setenv("GOMEMLIMIT", "1GiB"); return fit(true) }()} {
		if strings.Contains(out, "while decoding") || strings.Contains(out, "without the loan") || reads(out) != reads(noLoan) {
			t.Errorf("%s: a loan counted:\n%s", name, out)
		}
	}
}
