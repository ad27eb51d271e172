package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// TestMLXMatchesCPU runs every architecture family on MLX and on the CPU backend, on
// the same random checkpoint (float32, and MLX-quantized 4-bit g64 and 8-bit g32;
// gpt-oss also with mxfp4 experts beside 8-bit weights, as mlx-community ships it),
// under every KV cache kind the policy makes (float32, fp16, K8/V4 with 8/8 boundary
// layers, K4/V4, q4_0; Gemma's sliding layers rotate): a prefill in chunks of 16,
// then decode steps. The logits of every step agree within 1e-4 relative over float
// caches (MLX's CPU computes in float32 like the CPU backend) and 1e-3 over quantized
// ones (a key a float32 rounding away from a code boundary may take the other code on
// the other backend), and greedy tokens are identical.
func TestMLXMatchesCPU(t *testing.T) {
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)")
	}
	a := kvstore.AffineFormat
	type kv struct {
		name     string
		spec     kvstore.Spec
		boundary int
	}
	kvs := []kv{
		{"fp32", kvstore.Spec{}, 0},
		{"fp16", kvstore.SpecF16, 0},
		{"K8/V4+boundary", kvstore.Spec{K: a(8, 32), V: a(4, 32)}, 1},
		{"K4/V4", kvstore.Spec{K: a(4, 32), V: a(4, 32)}, 0},
		{"q4_0", kvstore.Spec{K: kvstore.FormatQ4_0, V: kvstore.FormatQ4_0}, 0},
	}
	archs := []struct {
		name string
		cfg  randmodel.Config
	}{
		{"llama", randmodel.Tiny("llama", 512)},
		{"mistral", randmodel.TinyMistral(512)},
		{"mistral3", randmodel.TinyMistral3(512)},
		{"phi3", randmodel.TinyPhi3(512)},
		{"qwen2", randmodel.Tiny("qwen2", 512)},
		{"qwen3", randmodel.Tiny("qwen3", 512)},
		{"qwen3_moe", randmodel.TinyMoE(512)},
		{"gemma3", randmodel.TinyGemma3(512)},
		{"qwen3_next", randmodel.TinyQwen3Next(512)},
		{"gemma4", randmodel.TinyGemma4(512)},
		{"gemma4_moe", randmodel.TinyGemma4MoE(512)},
		{"gpt_oss", randmodel.TinyGptOss(512)},
		{"glm4_moe", randmodel.TinyGlm4Moe(512)},
		{"glm4_moe_lite", randmodel.TinyGlm4MoeLite(512)},
	}
	mlx := mlxtest.Opener(t)
	prompt, steps := modeltest.Tokens(11, 40), 8
	for _, arch := range archs {
		hf := filepath.Join(t.TempDir(), "hf")
		if err := randmodel.Generate(hf, arch.cfg, randmodel.Options{Seed: 21}); err != nil {
			t.Fatal(err)
		}
		formats := []create.Options{{}, {Bits: 4, GroupSize: 64}, {Bits: 8, GroupSize: 32}}
		if arch.name == "gpt_oss" {
			// As mlx-community ships it: mxfp4 experts, the rest 8-bit.
			formats = append(formats, create.Options{Bits: 8, GroupSize: 32, Experts: quant.MXFP4})
		}
		for _, opts := range formats {
			dir := filepath.Join(t.TempDir(), "mlx")
			if _, err := create.Convert(context.Background(), hf, dir, opts); err != nil {
				t.Fatal(err)
			}
			cm, err := model.Load(dir, cpu.New(2))
			if err != nil {
				t.Fatal(err)
			}
			mb, err := mlx()
			if err != nil {
				t.Fatal(err)
			}
			mm, err := model.Load(dir, mb)
			if err != nil {
				t.Fatal(err)
			}
			worstF, worstQ := 0.0, 0.0
			for _, k := range kvs {
				name := fmt.Sprintf("%s/%s/%s", arch.name, formatName(opts), k.name)
				run := func(m *model.Model) ([]float32, []int32) {
					caches := kvCaches(t, m, dir, k.spec, k.boundary)
					logits := modeltest.Forward(t, m, caches, prompt, 16)
					logits = logits[len(logits)-m.Config.VocabSize:]
					var all []float32
					var toks []int32
					for range steps {
						id := int32(argmax(logits))
						toks = append(toks, id)
						all = append(all, logits...)
						if logits, err = m.Forward(context.Background(), []int32{id}, caches, false); err != nil {
							t.Fatalf("%s: %v", name, err)
						}
					}
					return append(all, logits...), toks
				}
				want, wantToks := run(cm)
				got, gotToks := run(mm)
				r := modeltest.MaxRel(got, want)
				tol := 1e-4
				if k.spec.Quantized() {
					tol = 1e-3
					worstQ = max(worstQ, r)
				} else {
					worstF = max(worstF, r)
				}
				if r > tol {
					t.Errorf("%s: logits differ from the CPU backend's by %.3g relative (> %.0e)", name, r, tol)
				}
				if !slices.Equal(gotToks, wantToks) {
					t.Errorf("%s: greedy tokens %v, the CPU backend's %v", name, gotToks, wantToks)
				}
			}
			t.Logf("%-13s %-24s: largest relative logit difference MLX vs CPU: %.2g over float caches, %.2g over quantized ones",
				arch.name, formatName(opts), worstF, worstQ)
			mb.(interface{ Close() error }).Close()
			mm.Close()
			cm.Close()
		}
	}
}

// kvCaches makes the caches of spec (the zero Spec: float32) with boundary layers at 8/8.
// formatName names a conversion in TestMLXMatchesCPU's messages.
func formatName(o create.Options) string {
	switch {
	case o.Experts != "":
		return fmt.Sprintf("%s experts, %d-bit g%d", o.Experts, o.Bits, o.GroupSize)
	case o.Bits == 0:
		return "float32"
	}
	return fmt.Sprintf("%d-bit g%d", o.Bits, o.GroupSize)
}

func kvCaches(t *testing.T, m *model.Model, dir string, spec kvstore.Spec, boundary int) []kvstore.Layer {
	t.Helper()
	if spec == (kvstore.Spec{}) {
		c, err := m.NewCaches(true)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	shape, err := kvstore.ShapeFromConfig(cfg, m.WeightBytes())
	if err != nil {
		t.Fatal(err)
	}
	a := kvstore.AffineFormat
	layout, err := kvstore.NewLayout(shape, spec, boundary, kvstore.Spec{K: a(8, 32), V: a(8, 32)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := kvstore.NewCaches(shape, layout)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.FillCaches(c); err != nil {
		t.Fatal(err)
	}
	return c
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
