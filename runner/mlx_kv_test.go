package runner

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/internal/half"
	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// TestMLXStoresKVAsCPU: after the same prefill on MLX and on the CPU backend, the first KV
// layer (whose keys and values depend only on the embeddings and one layer's products,
// which agree to a few float32 roundings) holds what the CPU backend's holds: float32
// caches within 1e-5 relative; rounded and quantized caches (fp16, K4/V4, q4_0 and the
// policy's default, Hadamard-rotated 6-bit) value for value, except single rounding
// steps (one fp16 ulp of an element, scale or bias; one quantization code) where a value
// lies within a float32 rounding of a rounding boundary, in under 1% of the stored values.
// A step's keys and values rounded another way than the cache's own rounding (truncation,
// a scale computed differently, a rotation missing) moves far more of them.
//
// The later layers are logged, not checked: they compute from the first layer's flipped
// values, and how far the difference grows from there is what TestMLXMatchesCPU's
// tolerances over rounded caches (mlxTolerance) allow for.
func TestMLXStoresKVAsCPU(t *testing.T) {
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)")
	}
	a := kvstore.AffineFormat
	mlx := mlxtest.Opener(t)
	caches := []struct {
		name string
		make func(t *testing.T, m *model.Model, dir string) []kvstore.Layer
	}{
		{"fp32", func(t *testing.T, m *model.Model, dir string) []kvstore.Layer {
			return kvCaches(t, m, dir, kvstore.Spec{}, 0)
		}},
		{"fp16", func(t *testing.T, m *model.Model, dir string) []kvstore.Layer {
			return kvCaches(t, m, dir, kvstore.SpecF16, 0)
		}},
		{"K4/V4", func(t *testing.T, m *model.Model, dir string) []kvstore.Layer {
			return kvCaches(t, m, dir, kvstore.Spec{K: a(4, 32), V: a(4, 32)}, 0)
		}},
		{"q4_0", func(t *testing.T, m *model.Model, dir string) []kvstore.Layer {
			return kvCaches(t, m, dir, kvstore.Spec{K: kvstore.FormatQ4_0, V: kvstore.FormatQ4_0}, 0)
		}},
		{"default", defaultCaches},
	}
	for _, arch := range []struct {
		name string
		cfg  randmodel.Config
	}{{"llama", randmodel.Tiny("llama", 512)}, {"gemma4", randmodel.TinyGemma4(512)}, {"qwen3_moe", randmodel.TinyMoE(512)}} {
		hf := filepath.Join(t.TempDir(), "hf")
		if err := randmodel.Generate(hf, arch.cfg, randmodel.Options{Seed: 21}); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "mlx")
		if _, err := create.Convert(context.Background(), hf, dir, create.Options{}); err != nil {
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
		prompt := modeltest.Tokens(11, 40)
		for _, kc := range caches {
			cc, mc := kc.make(t, cm, dir), kc.make(t, mm, dir)
			modeltest.Forward(t, cm, cc, prompt, 16)
			modeltest.Forward(t, mm, mc, prompt, 16)
			first := true
			for l := range cc {
				cs, ok := cc[l].(kvstore.BlockSource)
				if !ok {
					continue // a layer reading another's cache (Gemma 4's shared KV)
				}
				d := compareStored(cs, mc[l].(kvstore.BlockSource))
				name := fmt.Sprintf("%s/%s layer %d (%s)", arch.name, kc.name, l, cs.Spec())
				t.Logf("%s: %s", name, d)
				if !first {
					continue
				}
				first = false
				switch {
				case d.values == 0:
					t.Errorf("%s: nothing stored", name)
				case d.f32Rel > 1e-5:
					t.Errorf("%s: float32 keys and values differ by %.3g relative (> 1e-5)", name, d.f32Rel)
				case d.beyond > 0 || d.maxCode > 1:
					t.Errorf("%s: stored values differ by more than one rounding step: %s", name, d)
				case float64(d.flips) > 0.01*float64(d.values):
					t.Errorf("%s: more than 1%% of the stored values differ: %s", name, d)
				}
			}
		}
		mb.(interface{ Close() error }).Close()
		mm.Close()
		cm.Close()
	}
}

// storedDiff is how one layer's storage on MLX differs from the CPU backend's.
type storedDiff struct {
	values, flips   int     // halfs and codes compared, and those that differ
	maxUlp, maxCode int     // the largest differences, in fp16 ulps and in codes
	beyond          int     // halfs further apart than one rounding of values within 1e-5
	f32Rel          float64 // float32 caches: max |difference| / max |value|
}

func (d storedDiff) String() string {
	return fmt.Sprintf("%d of %d stored values differ (by at most %d fp16 ulps, %d codes; %d more than a rounding apart); float32 values within %.2g", d.flips, d.values, d.maxUlp, d.maxCode, d.beyond, d.f32Rel)
}

// compareStored compares the stored positions of two layers of the same spec and length.
func compareStored(want, got kvstore.BlockSource) storedDiff {
	var d storedDiff
	var maxAbs, maxDiff float64
	kvHeads, _, _ := want.Dims()
	wb, gb := want.Blocks(), got.Blocks()
	for i := range wb {
		for _, p := range [][2]kvstore.BlockData{{wb[i].K, gb[i].K}, {wb[i].V, gb[i].V}} {
			x, y := p[0], p[1]
			rows := wb[i].Slots * kvHeads
			from, to := wb[i].Slot*kvHeads, (wb[i].Slot+wb[i].Positions)*kvHeads
			if n := len(x.F32); n > 0 {
				for j := from * n / rows; j < to*n/rows; j++ {
					maxAbs = max(maxAbs, math.Abs(float64(x.F32[j])))
					maxDiff = max(maxDiff, math.Abs(float64(x.F32[j]-y.F32[j])))
				}
			}
			if n := len(x.Halfs); n > 0 {
				hs, ys := x.Halfs[from*n/rows:to*n/rows], y.Halfs[from*n/rows:to*n/rows]
				largest := 0.0 // an fp16 cache's largest element
				if x.Format.Mode == kvstore.F16 {
					for _, h := range hs {
						largest = max(largest, math.Abs(float64(half.F16ToF32(h))))
					}
				}
				for j := range hs {
					d.values++
					u := abs(orderedHalf(hs[j]) - orderedHalf(ys[j]))
					if u == 0 {
						continue
					}
					d.flips++
					d.maxUlp = max(d.maxUlp, u)
					// An element far below the layer's largest has ulps far below the float32
					// agreement (a relative 1e-5 of the largest), so more than one of them can
					// separate the two roundings; scales and biases are compared in ulps.
					a, b := float64(half.F16ToF32(hs[j])), float64(half.F16ToF32(ys[j]))
					if u > 1 && math.Abs(a-b) > 1e-5*largest+ulpF16(max(math.Abs(a), math.Abs(b))) {
						d.beyond++
					}
				}
			}
			if n := len(x.Codes); n > 0 {
				bits := x.Format.Bits
				for j := from * n * 32 / bits / rows; j < to*n*32/bits/rows; j++ {
					d.values++
					if c := abs(int(quant.Code(x.Codes, j, bits)) - int(quant.Code(y.Codes, j, bits))); c > 0 {
						d.flips++
						d.maxCode = max(d.maxCode, c)
					}
				}
			}
		}
	}
	if maxAbs > 0 {
		d.f32Rel = maxDiff / maxAbs
		d.values++ // a float32 layer counts as stored
	}
	return d
}

// orderedHalf maps fp16 bits to integers that count ulps across zero.
func orderedHalf(h uint16) int {
	if h&0x8000 != 0 {
		return -int(h & 0x7fff)
	}
	return int(h)
}

func abs(x int) int { return max(x, -x) }

// ulpF16 is the spacing of fp16 values at magnitude x.
func ulpF16(x float64) float64 {
	_, e := math.Frexp(max(x, 0x1p-14)) // x = f·2^e, f in [0.5, 1); subnormals space as 2^-24
	return math.Ldexp(1, e-11)
}

// defaultCaches makes m's caches in the policy's default layout.
func defaultCaches(t *testing.T, m *model.Model, dir string) []kvstore.Layer {
	return layoutCaches(t, m, dir, defaultLayout(t, m, dir))
}

// defaultLayout is the policy's default layout for m (its first step: K6h/V6h in groups
// of 64, smaller groups or unrotated where a layer's head_dim needs it).
func defaultLayout(t *testing.T, m *model.Model, dir string) kvstore.Layout {
	t.Helper()
	steps, err := kvstore.Ladder(modelShape(t, m, dir), kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return steps[0].Layout
}

// layoutCaches makes m's caches in layout.
func layoutCaches(t *testing.T, m *model.Model, dir string, layout kvstore.Layout) []kvstore.Layer {
	t.Helper()
	c, err := kvstore.NewCaches(modelShape(t, m, dir), layout)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.FillCaches(c); err != nil {
		t.Fatal(err)
	}
	return c
}

func modelShape(t *testing.T, m *model.Model, dir string) kvstore.ModelShape {
	t.Helper()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	shape, err := kvstore.ShapeFromConfig(cfg, m.WeightBytes())
	if err != nil {
		t.Fatal(err)
	}
	return shape
}
