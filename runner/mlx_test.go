package runner

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
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
// layers, K4/V4, q4_0, and the policy's default layout, Hadamard-rotated 6-bit; Gemma's
// sliding layers rotate): a prefill in chunks of 16, then greedy decode steps.
//
// Over float32 caches the logits of every step agree within floatTol. Over rounded
// caches, where each backend stores its own roundings and single flips grow through the
// layers, each of MLX's steps is also taken by the CPU backend over the caches MLX wrote,
// and those logits agree within floatTol (or half a rounding step where the step's own
// stored keys and values differ). In every run the greedy tokens are the same, up to a
// step where the CPU backend's two best logits are within what mlxTolerance lets drift
// (mayFlip); the runs are not compared past it.
func TestMLXMatchesCPU(t *testing.T) {
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)")
	}
	a := kvstore.AffineFormat
	type kv struct {
		name     string
		spec     kvstore.Spec
		boundary int
		policy   bool // the policy's default layout instead of spec
	}
	kvs := []kv{
		{"fp32", kvstore.Spec{}, 0, false},
		{"fp16", kvstore.SpecF16, 0, false},
		{"K8/V4+boundary", kvstore.Spec{K: a(8, 32), V: a(4, 32)}, 1, false},
		{"K4/V4", kvstore.Spec{K: a(4, 32), V: a(4, 32)}, 0, false},
		{"q4_0", kvstore.Spec{K: kvstore.FormatQ4_0, V: kvstore.FormatQ4_0}, 0, false},
		{"default", kvstore.Spec{}, 0, true},
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
			worstF, worstQ, worstShared := 0.0, 0.0, 0.0
			for _, k := range kvs {
				name := fmt.Sprintf("%s/%s/%s", arch.name, formatName(opts), k.name)
				mk := func(m *model.Model) []kvstore.Layer {
					if k.policy {
						return layoutCaches(t, m, dir, defaultLayout(t, m, dir))
					}
					return kvCaches(t, m, dir, k.spec, k.boundary)
				}
				specs := []kvstore.Spec{k.spec}
				if k.policy {
					specs = defaultLayout(t, cm, dir).Specs
				}
				tol := mlxTolerance(specs)
				rounded := tol > floatTol
				var checkShared func(s int, got, ref []float32, caches []kvstore.Layer)
				// run decodes greedily on m and returns the logits after the prompt and after each
				// of steps tokens; before step s, at(s, token, caches) may return logits to hold
				// the step's to.
				run := func(m *model.Model, at func(s int, tok int32, caches []kvstore.Layer) []float32) (all [][]float32, toks []int32) {
					caches := mk(m)
					logits := modeltest.Forward(t, m, caches, prompt, 16)
					all = [][]float32{logits[len(logits)-m.Config.VocabSize:]}
					for s := range steps {
						id := int32(argmax(all[s]))
						toks = append(toks, id)
						var ref []float32
						if at != nil {
							ref = at(s, id, caches)
						}
						if logits, err = m.Forward(context.Background(), []int32{id}, caches, false); err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						if ref != nil {
							checkShared(s, logits, ref, caches)
						}
						all = append(all, logits)
					}
					return all, toks
				}
				want, _ := run(cm, nil)
				var shared func(s int, tok int32, caches []kvstore.Layer) []float32
				sharedRel := 0.0
				if rounded {
					// Over the very caches MLX wrote: the CPU backend takes each of MLX's steps
					// over a replay of MLX's run up to it (MLX repeats itself bit for bit), so
					// both read the same stored values. Only the step's own keys and values,
					// which each backend computes and rounds itself before attending to them, may
					// differ; where none of them does, the logits agree as over float32 caches
					// (floatTol), and where some do, by a single step of those elements, under
					// half of the format's step (measured: up to a fifth, Gemma 4 over fp16).
					var mlxToks []int32
					var replay []kvstore.Layer
					checkShared = func(s int, got, ref []float32, caches []kvstore.Layer) {
						flips := 0
						for i := range caches {
							if c, ok := caches[i].(kvstore.BlockSource); ok {
								flips += compareStored(replay[i].(kvstore.BlockSource), c).flips
							}
						}
						r, bound := modeltest.MaxRel(got, ref), floatTol
						if flips > 0 {
							bound = max(floatTol, coarsestStep(specs)/2)
						}
						sharedRel = max(sharedRel, r)
						if r > bound {
							t.Errorf("%s: step %d: over the caches MLX wrote, the logits differ from the CPU backend's by %.3g relative (> %.2g; %d of the step's stored values differ)", name, s, r, bound, flips)
						}
					}
					shared = func(s int, tok int32, caches []kvstore.Layer) []float32 {
						mlxToks = append(mlxToks, tok)
						replay = mk(mm)
						modeltest.Forward(t, mm, replay, prompt, 16)
						for _, id := range mlxToks[:s] {
							if _, err := mm.Forward(context.Background(), []int32{id}, replay, false); err != nil {
								t.Fatalf("%s: %v", name, err)
							}
						}
						for i := range replay {
							if r, ok := replay[i].(kvstore.BlockSource); ok {
								if d := compareStored(caches[i].(kvstore.BlockSource), r); d.flips > 0 || d.f32Rel > 0 {
									t.Fatalf("%s: step %d: MLX's replay stored other values in layer %d: %s", name, s, i, d)
								}
							}
						}
						l, err := cm.Forward(context.Background(), []int32{tok}, replay, false)
						if err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						return l
					}
				}
				got, _ := run(mm, shared)
				worstShared = max(worstShared, sharedRel)
				// Each over its own caches: the logits are held to floatTol over float32 caches; over
				// rounded ones they drift apart from single rounding flips (TestMLXStoresKVAsCPU),
				// as far as a router picking another expert (0.8 in glm4_moe 4-bit over K4/V4), so
				// only the greedy tokens are compared, where the CPU's margin exceeds mlxTolerance's.
				r := 0.0
				for s := range want {
					r = max(r, modeltest.MaxRel(got[s], want[s]))
					if g, w := argmax(got[s]), argmax(want[s]); g != w && s < steps {
						if !mayFlip(want[s], tol) {
							t.Errorf("%s: step %d: greedy token %d, the CPU backend's %d, ahead by %.3g of its largest logit", name, s, g, w, margin(want[s]))
						} else {
							t.Logf("%s: step %d: greedy token %d, the CPU backend's %d, its two best within %.2g: not compared further", name, s, g, w, 2*tol)
						}
						break // the runs go on from different tokens
					}
				}
				if rounded {
					worstQ = max(worstQ, r)
				} else {
					worstF = max(worstF, r)
					if r > floatTol {
						t.Errorf("%s: logits differ from the CPU backend's by %.3g relative (> %.0e)", name, r, floatTol)
					}
				}
			}
			t.Logf("%-13s %-24s: largest relative logit difference MLX vs CPU over the caches MLX wrote %.2g; each over its own: %.2g float32, %.2g rounded",
				arch.name, formatName(opts), worstShared, worstF, worstQ)
			mb.(interface{ Close() error }).Close()
			mm.Close()
			cm.Close()
		}
	}
}

// floatTol is the relative logit tolerance (modeltest.MaxRel) of MLX against the CPU
// backend over float32 caches: both compute in float32 (MLX's CPU device, and the GPU
// with float32 weights and caches), differing in the order of their sums; they agree to
// about 2e-5.
const floatTol = 1e-4

// mlxTolerance is how far MLX's logits may drift from the CPU backend's when each runs over
// caches it rounded itself, or from MLX's own in another pass shape (batched against alone,
// a verification pass against steps), over caches of specs (a layout's, per layer; the zero
// Spec is float32, or a layer without KV): floatTol, grown by the coarsest rounding step s
// among the formats. TestMLXMatchesCPU uses it only to decide which greedy tokens must
// agree (mayFlip); TestBatchedMatchesAlone and TestVerificationPassesMatchSteps hold logits
// to it.
//
// A rounded cache turns the float32 disagreement into whole rounding steps: a value
// within a float32 rounding of a rounding boundary is stored one step (an fp16 ulp, a
// quantization code) away on the other side (TestMLXStoresKVAsCPU: 0.1-0.2% of the first
// layer's fp16 elements, no codes), and the next layers compute from the changed values,
// which flips more of theirs. With a disagreement ε per value, about n·ε/s of n values
// flip by s each; their effects on a logit add like a random walk, sqrt(n·ε/s)·s =
// sqrt(n·ε·s), so the tolerance is 16·sqrt(ε·s) with ε = floatTol: the factor stands for
// sqrt(n) and the models' own gain, measured at up to 2.6e-3 over fp16 caches (Gemma 4,
// whose unscaled attention sharpens a score's change, batched against alone) and 4.3e-2
// MLX against the CPU over 4-bit ones (gpt-oss over q4_0). That is 5e-3 for fp16, 1e-2
// for 8 bits, 2e-2 for 6 bits and 4e-2 for 4 bits. It bounds no discrete change: a router
// that picks another expert after a flip moves the logits by far more (0.8 in glm4_moe
// 4-bit over K4/V4). Reading and writing a cache are checked strictly elsewhere: over the
// caches MLX wrote (TestMLXMatchesCPU, floatTol), by TestMLXStoresKVAsCPU and by metal's
// attention tests.
func mlxTolerance(specs []kvstore.Spec) float64 {
	s := coarsestStep(specs)
	if s == 0 {
		return floatTol
	}
	return 16 * math.Sqrt(floatTol*s)
}

// coarsestStep is the largest roundingStep among specs' formats, 0 when all are float32.
func coarsestStep(specs []kvstore.Spec) float64 {
	s := 0.0
	for _, spec := range specs {
		if spec != (kvstore.Spec{}) {
			s = max(s, roundingStep(spec.K), roundingStep(spec.V))
		}
	}
	return s
}

// roundingStep is one rounding step of f relative to the values it stores: an fp16 ulp
// relative to its value (2^-10 at most), or one code of an affine or q4_0 group relative
// to the group's range.
func roundingStep(f kvstore.Format) float64 {
	if f.Mode == kvstore.F16 {
		return 0x1p-10
	}
	return 1 / float64(int(1)<<f.Bits-1)
}

// margin is how far logits' largest is ahead of the next, relative to the largest
// magnitude (MaxRel's denominator).
func margin(logits []float32) float64 {
	best, second := math.Inf(-1), math.Inf(-1)
	den := 0.0
	for _, v := range logits {
		x := float64(v)
		den = max(den, math.Abs(x))
		if x > best {
			best, second = x, best
		} else if x > second {
			second = x
		}
	}
	if den == 0 {
		return 0
	}
	return (best - second) / den
}

// mayFlip reports whether logits within tol of want (relative, as modeltest.MaxRel) may
// have another argmax: each logit may move by tol·max|want|, so the two best can swap
// only when they are within twice that.
func mayFlip(want []float32, tol float64) bool { return margin(want) <= 2*tol }

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
