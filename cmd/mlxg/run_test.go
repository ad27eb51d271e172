package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/text/template"
)

// runCLI runs the CLI in-process and returns stdout and stderr.
func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(strings.NewReader(""))
	err := root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

// TestCreateAndRun is the end-to-end check: mlxg create quantizes a generated
// Hugging Face checkpoint (with the real Qwen3 tokenizer and chat template) into the
// store, and mlxg run streams the same text the engine produces for that request.
func TestCreateAndRun(t *testing.T) {
	tok := testdata.Tokenizer(t, "qwen3")
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("MLXG_HOME", t.TempDir())
	t.Setenv("MLXG_BACKEND", "cpu")
	t.Setenv("MLXG_HOST", "127.0.0.1:1") // no server

	src := filepath.Join(t.TempDir(), "hf")
	cfg := randmodel.Tiny("qwen3", 151936)
	cfg.HiddenSize, cfg.IntermediateSize, cfg.HeadDim = 64, 128, 16
	cfg.DType = "bfloat16"
	cfg.EOSTokenIDs = []int{151645, 151643}
	if err := randmodel.Generate(src, cfg, randmodel.Options{Seed: 3, TokenizerDir: tok}); err != nil {
		t.Fatal(err)
	}

	stdout, stderr, err := runCLI(t, "create", "tiny-q4", "--from", src, "--quantize", "q4", "--group-size", "32")
	if err != nil {
		t.Fatalf("create: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "created tiny-q4") || !strings.Contains(stderr, "4-bit, group 32") {
		t.Fatalf("create said:\n%s\n%s", stdout, stderr)
	}
	store, err := registry.DefaultStore()
	if err != nil {
		t.Fatal(err)
	}
	name, _ := registry.ParseName("tiny-q4")
	m, err := store.Resolve(name)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenDir(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := ck.Tensor("model.layers.0.mlp.up_proj.weight")
	ck.Close()
	if w == nil || w.DType != safetensors.U32 {
		t.Fatalf("stored model is not quantized: %+v", w)
	}

	const prompt = "Tell me about the sea."
	stdout, stderr, err = runCLI(t, "run", "tiny-q4", prompt, "-o", "num_predict=10", "-o", "temperature=0", "-o", "repeat_penalty=1", "--verbose")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "eval rate:") {
		t.Fatalf("--verbose printed no timings:\n%s", stderr)
	}

	// The engine, on the same request, gives the same text.
	e, err := runner.Load(m.Dir, runner.LoadOptions{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	o := runner.Greedy()
	o.NumPredict = 10
	res, err := e.Generate(context.Background(), runner.Request{Messages: []template.Message{{"role": "user", "content": prompt}}, Options: o}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.EvalCount != 10 || stdout != res.Text+"\n" {
		t.Fatalf("mlxg run printed %q; the engine generated %q (%d tokens)", stdout, res.Text, res.EvalCount)
	}

	// A checkpoint directory runs too, and --raw skips the template.
	stdout, stderr, err = runCLI(t, "run", src, "--raw", "Once upon a time", "-o", "num_predict=4", "-o", "temperature=0")
	if err != nil || strings.TrimSpace(stdout) == "" {
		t.Fatalf("run on a directory: %v %q\n%s", err, stdout, stderr)
	}
}

func TestCreateErrors(t *testing.T) {
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("MLXG_HOME", t.TempDir())
	t.Setenv("MLXG_HOST", "127.0.0.1:1") // run goes through a server: the test's own, never one on 11434
	t.Setenv("MLXG_PREFIX_DIR", t.TempDir())
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "x"}, "--from"},
		{[]string{"create", "x", "--from", t.TempDir(), "--quantize", "q4_K_M"}, "q2, q3, q4"},
		{[]string{"create", "x", "--from", t.TempDir(), "--quantize", "q4", "--group-size", "48"}, "group"},
		{[]string{"create", "--from", t.TempDir()}, "NAME"},
		{[]string{"create", "x", "--from", t.TempDir()}, "config.json"},
	} {
		_, _, err := runCLI(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one mentioning %q", tc.args, err, tc.want)
		}
	}
	_, _, err := runCLI(t, "run", "no-such-model", "hi")
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("run of a missing model: %v", err)
	}
}

func TestParseRunOptions(t *testing.T) {
	o, err := parseRunOptions([]string{"num_predict=5", "temperature=0.5", "stop=\\n\\n", "stop=\"END\"", "seed=7", "top_k=3"})
	if err != nil {
		t.Fatal(err)
	}
	if o.NumPredict != 5 || o.Temperature != 0.5 || o.Seed != 7 || o.TopK != 3 || !slices.Equal(o.Stop, []string{`\n\n`, "END"}) {
		t.Fatalf("options %+v", o)
	}
	if o.NumCtx != runner.DefaultOptions().NumCtx {
		t.Fatal("unset options lost their defaults")
	}
	for _, bad := range []string{"nope=1", "temperature", "num_ctx=0", "top_k=many"} {
		if _, err := parseRunOptions([]string{bad}); err == nil {
			t.Errorf("option %q accepted", bad)
		}
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
