package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

func TestDoctorReport(t *testing.T) {
	var out bytes.Buffer
	failed := runDoctor(&out, 1)
	report := out.String()
	if failed != 0 {
		t.Fatalf("%d checks failed:\n%s", failed, report)
	}
	want := []string{"System", "OS", runtime.GOOS + "/" + runtime.GOARCH, "Memory", "Pressure", "Backends", "cpu (",
		"Linear affine 4-bit g64", "Attention affine k8/v4 cache", "RoPE yarn", "tiny qwen3: decode steps vs one prefill", "All checks passed."}
	if runtime.GOOS != "darwin" || runtime.GOARCH != "arm64" {
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
