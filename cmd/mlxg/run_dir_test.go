package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry/randmodel"
)

// mlxg run on a checkpoint directory takes the KV policy's caches and the user's KV
// settings, as serve does: its log shows the policy's plan, and a setting that cannot fit
// the model is an error naming it.
func TestRunDirectoryKVPolicy(t *testing.T) {
	tok := testdata.Tokenizer(t, "qwen3")
	t.Setenv("MLXG_BACKEND", "cpu")
	t.Setenv("MLXG_HOST", "127.0.0.1:1") // no server
	src := filepath.Join(t.TempDir(), "hf")
	cfg := randmodel.Tiny("qwen3", 151936)
	cfg.HiddenSize, cfg.IntermediateSize, cfg.HeadDim = 128, 128, 64
	if err := randmodel.Generate(src, cfg, randmodel.Options{Seed: 5, TokenizerDir: tok}); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := runCLI(t, "run", src, "--kv-bits", "(8, 8)", "--kv-boundary-layers", "0", "--verbose", "--raw", "Once upon a time",
		"-o", "num_predict=3", "-o", "temperature=0")
	if err != nil || strings.TrimSpace(stdout) == "" {
		t.Fatalf("run on a directory: %v %q\n%s", err, stdout, stderr)
	}
	if !strings.Contains(stderr, `msg="kv policy"`) || !strings.Contains(stderr, `layout="K8/V8 g64/32,`) ||
		!strings.Contains(stderr, "kv-bits from --kv-bits") {
		t.Errorf("no KV policy plan with the flags' spec in the log:\n%s", stderr)
	}

	t.Setenv("MLXG_KV_GROUP_SIZE", "128")
	_, stderr, err = runCLI(t, "run", src, "--raw", "Once upon a time", "-o", "num_predict=3")
	if err == nil || !strings.Contains(err.Error(), "MLXG_KV_GROUP_SIZE") || !strings.Contains(err.Error(), "head_dim 64") {
		t.Errorf("a group size that does not divide head_dim 64: %v\n%s", err, stderr)
	}
}

// mlxg run DIR --draft-model DIR2 drafts with DIR2: the greedy text is the model's own, and
// --verbose reports drafted tokens. A served model's draft is the server's business.
func TestRunDirectoryDraftModel(t *testing.T) {
	tiny := testdata.SharedModel(t, "qwen3-tiny")
	t.Setenv("MLXG_BACKEND", "cpu")
	t.Setenv("MLXG_HOST", "127.0.0.1:1") // no server
	args := []string{"run", tiny, "--verbose", "--raw", "The capital of France is", "-o", "num_predict=12", "-o", "temperature=0"}
	plain, _, err := runCLI(t, append(args, "--num-draft", "0")...)
	if err != nil {
		t.Fatal(err)
	}
	drafted, stderr, err := runCLI(t, append(args, "--draft-model", tiny, "--num-draft", "4")...)
	if err != nil || drafted != plain || strings.TrimSpace(plain) == "" {
		t.Fatalf("with a draft model: %v %q; without: %q\n%s", err, drafted, plain, stderr)
	}
	if !strings.Contains(stderr, "draft tokens:") {
		t.Errorf("--verbose reports no drafted tokens:\n%s", stderr)
	}
	if _, _, err := runCLI(t, "run", "qwen3:0.6b", "--draft-model", "small", "Hi"); err == nil || !strings.Contains(err.Error(), "PARAMETER draft_model") {
		t.Errorf("--draft-model with a served model: %v", err)
	}
}
