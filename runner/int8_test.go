package runner

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/text/tokenizer"
)

// TestInt8Qwen3Tiny measures what 8-bit inputs (cpu.Backend.UseInt8) cost on the trained
// Qwen3 model at 4 bits, group 64: after a prefill (in float, but for the last position's
// output layer), 96 decode steps teacher-forced along the float backend's greedy text, the int8 backend's logits against the float ones:
// the largest relative difference (MaxRel, per step) and how often the greedy token agrees.
func TestInt8Qwen3Tiny(t *testing.T) {
	if !quant.Int8Kernel() {
		t.Skip("no integer kernels on this machine")
	}
	src := testdata.SharedModel(t, "qwen3-tiny")
	dir := filepath.Join(t.TempDir(), "q4")
	if _, err := create.Convert(context.Background(), src, dir, create.Options{Bits: 4, GroupSize: 64}); err != nil {
		t.Fatal(err)
	}
	plain, err := LoadModel(dir, LoadOptions{Threads: 2, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	be := cpu.New(2)
	be.UseInt8(true)
	int8, err := LoadModel(dir, LoadOptions{Backend: be, Threads: 2, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer int8.Close()
	full, err := LoadModel(src, LoadOptions{Threads: 2, Logger: quietLog()}) // fp16 weights: what 4 bits cost, for scale
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()

	tok, err := tokenizer.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	prompt := tok.Encode("Once upon a time, in a small village by the sea, there lived", false)
	const steps = 96
	cp, _ := plain.Model.NewCaches(false)
	ci, _ := int8.Model.NewCaches(false)
	cf, _ := full.Model.NewCaches(false)
	lp, err := plain.Model.Forward(context.Background(), prompt, cp, false)
	if err != nil {
		t.Fatal(err)
	}
	li, err := int8.Model.Forward(context.Background(), prompt, ci, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := full.Model.Forward(context.Background(), prompt, cf, false); err != nil {
		t.Fatal(err)
	}
	agree, agreeQ4 := 0, 0
	var errs, errsQ4 []float64
	for range steps {
		next := int32(argmax(lp)) // the float model's greedy text, fed to both
		if lp, err = plain.Model.Forward(context.Background(), []int32{next}, cp, false); err != nil {
			t.Fatal(err)
		}
		if li, err = int8.Model.Forward(context.Background(), []int32{next}, ci, false); err != nil {
			t.Fatal(err)
		}
		lf, err := full.Model.Forward(context.Background(), []int32{next}, cf, false)
		if err != nil {
			t.Fatal(err)
		}
		if argmax(lp) == argmax(li) {
			agree++
		}
		if argmax(lp) == argmax(lf) {
			agreeQ4++
		}
		errs = append(errs, modeltest.MaxRel(li, lp))
		errsQ4 = append(errsQ4, modeltest.MaxRel(lp, lf))
	}
	slices.Sort(errs)
	slices.Sort(errsQ4)
	med, worst := errs[len(errs)/2], errs[len(errs)-1]
	t.Logf("8-bit inputs on qwen3-tiny q4 g64, %d decode steps: greedy token agrees in %d, MaxRel of the logits median %.3g, largest %.3g", steps, agree, med, worst)
	t.Logf("for scale, 4-bit against fp16 weights (both float inputs): greedy token agrees in %d, MaxRel median %.3g, largest %.3g", agreeQ4, errsQ4[len(errsQ4)/2], errsQ4[len(errsQ4)-1])
	if med == 0 {
		t.Error("the logits did not change: the integer path did not run")
	}
	if float64(agree) < 0.9*steps || med > 3e-2 || math.IsNaN(worst) {
		t.Errorf("8-bit inputs cost too much: greedy agreement %d of %d, median relative logit error %.3g", agree, steps, med)
	}
}
