package main

import (
	"strings"
	"testing"
)

// TestServeBadSettings: a malformed setting stops serve before it listens, naming the variable.
func TestServeBadSettings(t *testing.T) {
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("MLXG_HOME", t.TempDir())
	t.Setenv("MLXG_HOST", "127.0.0.1:1") // never reached
	for _, c := range []struct{ env, value, want string }{
		{"MLXG_LOG_FORMAT", "xml", "MLXG_LOG_FORMAT"},
		{"MLXG_KEEP_ALIVE", "soon", "MLXG_KEEP_ALIVE"},
		{"OLLAMA_NUM_PARALLEL", "0", "OLLAMA_NUM_PARALLEL"},
		{"MLXG_MAX_QUEUE", "lots", "MLXG_MAX_QUEUE"},
		{"MLXG_CONTEXT_LENGTH", "-5", "MLXG_CONTEXT_LENGTH"},
		{"MLXG_MAX_MEMORY", "plenty", "MLXG_MAX_MEMORY"},
		{"MLXG_KV_BITS", "7", "MLXG_KV_BITS"},
	} {
		t.Run(c.env, func(t *testing.T) {
			t.Setenv(c.env, c.value)
			_, _, err := runCLI(t, "serve")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%s=%s: %v", c.env, c.value, err)
			}
		})
	}
	if _, _, err := runCLI(t, "serve", "--kv-bits", "(8, x)"); err == nil || !strings.Contains(err.Error(), "kv-bits") {
		t.Fatalf("--kv-bits: %v", err)
	}
}
