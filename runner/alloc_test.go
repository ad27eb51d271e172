package runner

import (
	"testing"

	"github.com/mlxg/mlxg/registry/randmodel"
)

// TestDecodeAllocs: a decode step reuses its buffers (tensor headers, activations, the
// logits, the crew's jobs) instead of allocating them, so that the collector has little
// to do. On this 8-layer model a step made 602 allocations and ~80 KB before the reuse,
// 80-110 and ~11 KB after (what is left: closures handed to the crew). The bounds are
// loose; the byte bound is below one logits slice.
func TestDecodeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what allocates")
	}
	cfg := randmodel.Tiny("qwen2", 8192)
	cfg.NumLayers = 8
	e, err := LoadModel(random4Bit(t, "q4", cfg, 3), LoadOptions{Threads: 2, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	allocs, bytes := decodeAllocs(t, e)
	t.Logf("%.1f allocations, %.0f bytes per decoded token", allocs, bytes)
	if allocs > 300 || bytes > 4*8192 {
		t.Errorf("a decode step allocates %.1f times, %.0f bytes: want at most 300 and %d", allocs, bytes, 4*8192)
	}
}
