package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/runner/backend"
	"github.com/mlxg/mlxg/runner/model"
)

func TestDoctorReport(t *testing.T) {
	t.Setenv("MLXG_BACKEND", "")
	var out bytes.Buffer
	failed := runDoctor(&out, 1)
	report := out.String()
	if failed != 0 {
		t.Fatalf("%d checks failed:\n%s", failed, report)
	}
	want := []string{"System", "OS", runtime.GOOS + "/" + runtime.GOARCH, "Memory", "Pressure", "Backends", "cpu (",
		"Linear affine 4-bit g64", "Attention affine k8/v4 cache", "RoPE yarn", "VerifyRows", "Free (buffers reused",
		"tiny qwen3 float32: decode steps vs one prefill", "tiny qwen3_moe 4-bit: streamed vs mapped", "tiny qwen3_next 4-bit: logits",
		"tiny gpt_oss mxfp4-q8: streamed vs mapped",
		"AttentionSpans sliding window fp16 cache", "LayerNorm", "BlockAttention",
		"tiny qwen3_5_moe float32 with images: image features", "tiny gemma3 float32 with images: logits",
		"tiny gemma4 kv-shared 4-bit with images: logits", "tiny gemma4 kv-shared clipped float32 with images: image features",
		"Summary: ", "All checks passed."}
	switch {
	case runtime.GOOS == "linux" && mlxtest.Enabled(): // an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux): MLX on the CPU
		want = append(want, "mlx       available: mlx-cpu", "GatedDelta (prefill, then a step)", "MoE affine 4-bit")
		// MLX streams gpt-oss's mxfp4 experts too: its line beside the reference's.
		if n := passedLines(report, "tiny gpt_oss mxfp4-q8: streamed vs mapped"); n != 2 {
			t.Errorf("%d of the CPU's and MLX's streamed-vs-mapped checks of gpt-oss's mxfp4 experts passed:\n%s", n, report)
		}
	case runtime.GOOS == "linux":
		want = append(want, "MLX on Linux")
	case runtime.GOOS != "darwin" || runtime.GOARCH != "arm64":
		want = append(want, "Metal is only available on macOS on Apple Silicon")
	}
	for _, w := range want {
		if !strings.Contains(report, w) {
			t.Errorf("the report lacks %q:\n%s", w, report)
		}
	}
	if strings.Count(report, " PASS  ") < 150 || strings.Contains(report, "FAIL") {
		t.Errorf("fewer checks than expected passed:\n%s", report)
	}
	// Every registered architecture has a line: its checks, or NOT COVERED.
	uncovered := backend.Uncovered()
	for _, mt := range model.Supported() {
		want := "tiny " + mt + " float32: decode steps vs one prefill"
		if _, ok := uncovered[mt]; ok {
			want = "NOT COVERED  tiny " + mt + " "
		}
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q:\n%s", want, report)
		}
	}
}

// --report writes the same report to a file, for a bug report.
func TestDoctorReportFile(t *testing.T) {
	t.Setenv("MLXG_BACKEND", "")
	path := filepath.Join(t.TempDir(), "doctor.txt")
	var out, errOut bytes.Buffer
	cmd := newDoctorCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"--report", path, "--seed", "2"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != out.String() || !strings.Contains(out.String(), "doctor (seed 2)") || !strings.Contains(errOut.String(), "report written to "+path) {
		t.Errorf("the file holds %d bytes, the output %d; stderr %q", len(data), out.Len(), errOut.String())
	}
}

// Forcing a backend that cannot run here is a failed check: mlxg would not start.
func TestDoctorFailsAForcedBackendThatCannotRun(t *testing.T) {
	if runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" {
		t.Skip("Metal may run here")
	}
	t.Setenv("MLXG_BACKEND", "metal")
	var out bytes.Buffer
	if failed := runDoctor(&out, 1); failed != 1 {
		t.Fatalf("%d failed checks, want 1:\n%s", failed, out.String())
	}
	// Without libmlxc the Metal backend cannot load; with Linux's, MLX runs on the CPU,
	// which is not Apple's GPU either.
	for _, w := range []string{"FAIL: MLXG_BACKEND=metal, but ", "1 check(s) FAILED."} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("the report lacks %q:\n%s", w, out.String())
		}
	}
}

// passedLines counts the lines of report that have check and its status PASS.
func passedLines(report, check string) int {
	n := 0
	for _, l := range strings.Split(report, "\n") {
		if strings.Contains(l, check) && strings.Contains(l, "PASS") {
			n++
		}
	}
	return n
}
