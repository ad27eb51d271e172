// Package modeltest holds helpers the architectures' tests share: a seeded random prompt,
// a chunked forward pass, the relative error between two logit vectors, and the check of a
// converted checkpoint against transformers' reference (a testdata/ref.py's refs.json); for
// the vision families, test images, prompts with images and their forward passes, the check
// against transformers' vision reference (testdata/vision), and the tower's memory and time.
// The engine-level tests they share are runner/runnertest's.
package modeltest

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
)

// Tokens is a prompt of n ids below 256, fixed by seed.
func Tokens(seed uint64, n int) []int32 {
	r := rand.New(rand.NewPCG(seed, seed))
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(r.IntN(256))
	}
	return p
}

// Forward feeds tokens in chunks of chunk and returns every position's logits.
func Forward(t testing.TB, m *model.Model, caches []kvstore.Layer, tokens []int32, chunk int) []float32 {
	t.Helper()
	var all []float32
	for i := 0; i < len(tokens); i += chunk {
		l, err := m.Forward(context.Background(), tokens[i:min(i+chunk, len(tokens))], caches, true)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, l...)
	}
	return all
}

// MaxRel is max|a-b| / max|b|.
func MaxRel(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		num = max(num, math.Abs(float64(a[i]-b[i])))
		den = max(den, math.Abs(float64(b[i])))
	}
	return num / den
}

// RefVariant is one variant's transformers reference (a testdata/ref.py's refs.json): the
// prompt's last-position logits, the greedy continuation decoded through the cache, and the
// margin between the two best logits at each greedy step, all in float64.
type RefVariant struct {
	Logits  []float64 `json:"logits"`
	Greedy  []int32   `json:"greedy"`
	Margins []float64 `json:"margins"`
}

// RefCase is one checkpoint of a refs.json: its directory name under testdata, the prompt
// and the references of its variants ("f32", "q4", "q8").
type RefCase struct {
	Name     string                `json:"name"`
	Prompt   []int32               `json:"prompt"`
	Variants map[string]RefVariant `json:"variants"`
}

// ReadRefs reads testdata/refs.json, or skips the test, naming the script that writes it,
// when it is absent (the script runs where torch and transformers are installed).
func ReadRefs(t *testing.T, script string) []RefCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "refs.json"))
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("testdata/refs.json is absent: run %s --out testdata on a machine with torch and transformers", script)
	}
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []RefCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) == 0 {
		t.Fatal("testdata/refs.json has no cases")
	}
	return f.Cases
}

// CheckRef runs prompt through m with float32 caches and compares the last-position logits
// with ref's within 1e-4 relative (max|got-want| / max|want|), then decodes greedily one
// token at a time through the caches and compares the tokens, up to the first step whose
// reference margin is below 1e-3 (where float32 may pick the other token).
func CheckRef(t *testing.T, m *model.Model, prompt []int32, ref RefVariant) {
	t.Helper()
	caches, err := m.NewCaches(true)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := m.Forward(context.Background(), prompt, caches, false)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, len(ref.Logits))
	for i, v := range ref.Logits {
		want[i] = float32(v)
	}
	if len(logits) != len(want) {
		t.Fatalf("%d logits, the reference has %d", len(logits), len(want))
	}
	if r := MaxRel(logits, want); r > 1e-4 || math.IsNaN(r) {
		t.Errorf("last-position logits differ from transformers' by %.3g relative", r)
	} else {
		t.Logf("logits within %.2g of transformers'", r)
	}
	var got []int32
	for step, id := range ref.Greedy {
		next := int32(0)
		for i, v := range logits {
			if v > logits[next] {
				next = int32(i)
			}
		}
		got = append(got, next)
		if next != id {
			if ref.Margins[step] < 1e-3 {
				t.Logf("step %d: %d, transformers %d by a margin of %.2g: not compared further", step, next, id, ref.Margins[step])
				return
			}
			t.Fatalf("greedy tokens %v, transformers %v (margins %v)", got, ref.Greedy[:step+1], ref.Margins[:step+1])
		}
		if logits, err = m.Forward(context.Background(), []int32{next}, caches, false); err != nil {
			t.Fatal(err)
		}
	}
}

// Convert converts the Hugging Face checkpoint hf as `mlxg create` does, in the named
// variant: "f32" keeps the float weights, "q4" and "q8" quantize them (affine, groups of 32,
// as the ref.py scripts quantize their reference weights). It returns the MLX checkpoint's
// directory.
func Convert(t *testing.T, hf, variant string) string {
	t.Helper()
	opts, ok := map[string]create.Options{
		"f32": {},
		"q4":  {Bits: 4, GroupSize: 32},
		"q8":  {Bits: 8, GroupSize: 32},
	}[variant]
	if !ok {
		t.Fatalf("unknown variant %q", variant)
	}
	return ConvertWith(t, hf, variant, opts)
}

// ConvertWith converts hf with opts into a directory named after variant.
func ConvertWith(t *testing.T, hf, variant string, opts create.Options) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), variant)
	if _, err := create.Convert(context.Background(), hf, out, opts); err != nil {
		t.Fatal(err)
	}
	return out
}

// CheckAgainstTransformers checks every case of testdata/refs.json (written by script) in
// every variant: convert makes the variant's MLX checkpoint of testdata/<case> (Convert
// when nil), which is loaded on backend (the CPU one: float32 caches, exact sliding
// windows) and compared by CheckRef.
func CheckAgainstTransformers(t *testing.T, backend compute.Backend, script string, variants []string, convert func(t *testing.T, hf, variant string) string) {
	if convert == nil {
		convert = Convert
	}
	for _, c := range ReadRefs(t, script) {
		for _, name := range variants {
			ref, ok := c.Variants[name]
			if !ok {
				t.Fatalf("%s: no reference for %s", c.Name, name)
			}
			t.Run(c.Name+"/"+name, func(t *testing.T) {
				m, err := model.Load(convert(t, filepath.Join("testdata", c.Name), name), backend)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				CheckRef(t, m, c.Prompt, ref)
			})
		}
	}
}
