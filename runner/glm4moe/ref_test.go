package glm4moe_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// The fixture in testdata is written by testdata/ref.py on a machine with torch and
// transformers: tiny random GLM checkpoints (glm4_moe and glm4_moe_lite) made with
// save_pretrained (float32, Hugging Face's layout) and, per case and per variant (float,
// 4-bit, 8-bit), transformers' last-position logits of the prompt and its greedy
// continuation, in float64. The quantized variants' references are computed on the
// weights the converted checkpoint decodes to (ref.py repeats internal/quant's
// quantizer on what `mlxg create` quantizes).

type variant struct {
	Logits  []float64 `json:"logits"`
	Greedy  []int32   `json:"greedy"`
	Margins []float64 `json:"margins"`
}

type refCase struct {
	Name     string             `json:"name"`
	Arch     string             `json:"arch"`
	Prompt   []int32            `json:"prompt"`
	Variants map[string]variant `json:"variants"`
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// TestLogitsAgainstTransformers converts every case's checkpoint with `mlxg create`
// (float, 4-bit and 8-bit, groups of 32), loads it on the CPU backend with float32 caches
// (latent ones for glm4_moe_lite) and checks the prompt's last-position logits within
// 1e-4 relative and the greedy tokens, decoded one step at a time through the caches, up
// to the first step whose reference margin between the two best logits is below 1e-3.
func TestLogitsAgainstTransformers(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "refs.json"))
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("testdata/refs.json is absent: run `python3 ref.py --out .` in runner/glm4moe/testdata (torch, transformers) to make it")
	}
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []refCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) == 0 {
		t.Fatal("testdata/refs.json has no cases")
	}
	for _, c := range f.Cases {
		hf := filepath.Join("testdata", c.Name)
		for _, name := range []string{"f32", "q4", "q8"} {
			ref, ok := c.Variants[name]
			if !ok {
				t.Fatalf("%s: no reference for %s", c.Name, name)
			}
			t.Run(c.Name+"/"+name, func(t *testing.T) {
				out := filepath.Join(t.TempDir(), name)
				opts := map[string]create.Options{"f32": {}, "q4": {Bits: 4, GroupSize: 32}, "q8": {Bits: 8, GroupSize: 32}}[name]
				if _, err := create.Convert(context.Background(), hf, out, opts); err != nil {
					t.Fatal(err)
				}
				m, err := model.Load(out, cpu.New(2))
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				caches, err := m.NewCaches(true)
				if err != nil {
					t.Fatal(err)
				}
				logits, err := m.Forward(context.Background(), c.Prompt, caches, false)
				if err != nil {
					t.Fatal(err)
				}
				want := make([]float32, len(ref.Logits))
				for i, v := range ref.Logits {
					want[i] = float32(v)
				}
				if r := modeltest.MaxRel(logits, want); r > 1e-4 || math.IsNaN(r) {
					t.Errorf("last-position logits differ from transformers' by %.3g relative", r)
				} else {
					t.Logf("logits within %.2g of transformers'", r)
				}
				var got []int32
				for step, id := range ref.Greedy {
					next := argmax(logits)
					got = append(got, next)
					if next != id {
						if ref.Margins[step] < 1e-3 {
							t.Logf("step %d: %d, transformers %d by a margin of %.2g: not compared further", step, next, id, ref.Margins[step])
							break
						}
						t.Fatalf("greedy tokens %v, transformers %v (margins %v)", got, ref.Greedy[:step+1], ref.Margins[:step+1])
					}
					if logits, err = m.Forward(context.Background(), []int32{next}, caches, false); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}
