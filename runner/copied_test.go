package runner

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
)

// TestLoadWarnsOfCopiedWeights: loading a checkpoint whose quantized tensors lie at
// misaligned offsets (a bf16 Gemma 4 rewritten in name order without padding, as a writer
// that pads nothing leaves it after the two-byte layer_scalar) warns that the CPU backend
// holds copies of them exactly where it copies them: on a platform that reads misaligned
// weights in place (cpu.ReadsMisaligned: amd64, arm64) it copies nothing and says nothing.
// The same checkpoint as `mlxg create` wrote it never warns.
func TestLoadWarnsOfCopiedWeights(t *testing.T) {
	dir := t.TempDir()
	hf, aligned, packed := filepath.Join(dir, "hf"), filepath.Join(dir, "aligned"), filepath.Join(dir, "packed")
	cfg := randmodel.TinyGemma4(256)
	cfg.DType = "bfloat16"
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, aligned, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenDir(aligned)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, n := range slices.Sorted(slices.Values(ck.Names())) {
		tt, _ := ck.Tensor(n)
		ts = append(ts, *tt)
	}
	if err := os.MkdirAll(packed, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Write(filepath.Join(packed, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	ck.Close()
	for _, f := range []string{"config.json", "generation_config.json"} {
		b, err := os.ReadFile(filepath.Join(aligned, f))
		if err == nil {
			err = os.WriteFile(filepath.Join(packed, f), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// The rewrite must leave packed codes misaligned in the mapping, or the test covers nothing.
	pk, err := safetensors.OpenDir(packed)
	if err != nil {
		t.Fatal(err)
	}
	misaligned := 0
	for _, n := range pk.Names() {
		if tt, _ := pk.Tensor(n); tt.DType == safetensors.U32 && len(tt.Data) > 0 && uintptr(unsafe.Pointer(&tt.Data[0]))%4 != 0 {
			misaligned++
		}
	}
	pk.Close()
	if misaligned == 0 {
		t.Fatal("the rewritten checkpoint has no misaligned packed codes")
	}
	for _, c := range []struct {
		dir  string
		warn bool
	}{{aligned, false}, {packed, !cpu.ReadsMisaligned}} {
		var logs bytes.Buffer
		e, err := LoadModel(c.dir, LoadOptions{Threads: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		e.Close()
		if got := strings.Contains(logs.String(), "not aligned"); got != c.warn {
			t.Errorf("%s: warned of copied weights %v, want %v; log:\n%s", filepath.Base(c.dir), got, c.warn, logs.String())
		}
	}
}
