package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/api"
)

func TestPrintPs(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ps := &api.ProcessResponse{Models: []api.ProcessModelResponse{
		{Name: "qwen3:0.6b", Digest: "0123456789abcdef", Size: 2_000_000_000, SizeVRAM: 2_000_000_000, ContextLength: 8192,
			KVCache: "K8/V4 g64/32", ExpiresAt: now.Add(4 * time.Minute), Draft: "qwen3:0.1b",
			ContextReason: "sized from memory: the most whose KV (1.1 GiB) fits in half the 2.2 GiB free for KV (the model's maximum is 40960)"},
		{Name: "org/cpu-model", Digest: "abc", Size: 1_000_000, ContextLength: 4096, KVCache: "fp16",
			ExpiresAt: now.Add(time.Duration(1<<63 - 1)),
			Vision:    &api.ProcessVision{Weights: 900_000_000, EncodePeak: 6_200_000_000, MaxPatches: 65536, Features: 268_435_456}},
		{Name: "split", Digest: "d", Size: 100, SizeVRAM: 25, ExpiresAt: now.Add(-time.Second),
			Vision: &api.ProcessVision{Weights: 1_000_000, EncodePeak: 150_000_000, MaxPatches: 4096, Features: 8_000_000, MaxPixels: 1 << 20, Lowered: true}},
	}}
	var b bytes.Buffer
	if err := printPs(&b, ps, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Count(out, "vision tower") != 2 || strings.Count(out, "lowered to fit memory") != 1 {
		t.Errorf("a vision line for other than the one vision model:\n%s", out)
	}
	for _, want := range []string{"NAME", "KV CACHE", "qwen3:0.6b", "0123456789ab ", "2.0 GB", "100% GPU", "8192", "K8/V4 g64/32",
		"4 minutes from now", "100% CPU", "Forever", "75%/25% CPU/GPU", "Stopping...", "qwen3:0.6b is drafted by qwen3:0.1b",
		"qwen3:0.6b context 8192: sized from memory: the most whose KV",
		"org/cpu-model vision tower: 900 MB weights, 6.2 GB to encode an image of up to 65,536 patches, 268 MB of kept features\n",
		"split vision tower: 1.0 MB weights, 150 MB to encode an image of up to 4,096 patches, 8.0 MB of kept features (images resized within 1,048,576 pixels, lowered to fit memory)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestRunningMatches(t *testing.T) {
	for _, c := range []struct {
		listed, typed string
		want          bool
	}{
		{"qwen3:latest", "qwen3", true}, {"qwen3:latest", "qwen3:latest", true}, {"qwen3:0.6b", "qwen3", false},
		{"org/name", "org/name", true}, {"org/name:latest", "org/name", false},
	} {
		if got := runningMatches(c.listed, c.typed); got != c.want {
			t.Errorf("runningMatches(%q, %q) = %v", c.listed, c.typed, got)
		}
	}
}

func TestPrintPsRanks(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ps := &api.ProcessResponse{Models: []api.ProcessModelResponse{
		{Name: "big:latest", Digest: "0123456789abcdef", Size: 100, ExpiresAt: now.Add(time.Minute), Ranks: []api.ProcessRank{
			{Rank: 0, Host: "10.0.0.1:5000", Layers: "0-23", State: "ready"},
			{Rank: 1, Host: "10.0.0.2:5000", Layers: "24-47", State: "gone"},
		}},
	}}
	var b bytes.Buffer
	if err := printPs(&b, ps, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"RANK", "HOST", "LAYERS", "10.0.0.1:5000", "0-23", "24-47", "gone"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestPrintPsBatch(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ps := &api.ProcessResponse{Models: []api.ProcessModelResponse{
		{Name: "batched", Digest: "0123456789abcdef", Size: 100, ExpiresAt: now.Add(time.Minute),
			Batch: &api.ProcessBatch{MaxSequences: 8, Running: 3, Waiting: 2, Steps: 10, MeanSequences: 2.5}},
		{Name: "alone", Digest: "d", Size: 100, ExpiresAt: now.Add(time.Minute)},
	}}
	var b bytes.Buffer
	if err := printPs(&b, ps, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"BATCH", "3/8 +2 waiting", "alone"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
