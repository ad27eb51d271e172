package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/metal/mlxtest"
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
		"Linear affine 4-bit g64", "Attention affine k8/v4 cache", "RoPE yarn", "tiny qwen3: decode steps vs one prefill", "All checks passed."}
	switch {
	case runtime.GOOS == "linux" && mlxtest.Enabled(): // an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux): MLX on the CPU
		want = append(want, "mlx       available: mlx-cpu", "GatedDelta (prefill, then a step)", "MoE affine 4-bit")
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
	if strings.Count(report, "  ok  ") < 32 {
		t.Errorf("fewer checks than expected ran:\n%s", report)
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
