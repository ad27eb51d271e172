package gemma4_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/gemma4"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/vision"
)

// TestVisionMemoryOnMLX: on MLX (an installed libmlxc), encoding the processor's largest
// image (max_soft_tokens 1,120 pooled 2×2: 4,480 patches) holds no more than the memory
// plan's estimate of the backend's arrays above the weights (so within the plan's encode
// peak), and the plan's figure is within 3 times what MLX held, for a tower of 2 blocks 128
// wide whose activations outweigh its weights many times, with and without clamped linears.
func TestVisionMemoryOnMLX(t *testing.T) {
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc")
	}
	for _, clipped := range []bool{false, true} {
		v := randmodel.TinyGemma4Vision()
		v.Hidden, v.Intermediate, v.Heads, v.KVHeads, v.HeadDim, v.Layers = 128, 512, 4, 4, 32, 2
		v.MaxSoftTokens, v.Clipped = 1120, clipped
		dir := filepath.Join(t.TempDir(), "gemma4v")
		text := randmodel.TinyGemma4(256)
		text.Arch, text.KVSharedLayers, text.DoubleWideMLP = "gemma4", 0, false
		if err := randmodel.Generate(dir, text, randmodel.Options{Seed: 7}); err != nil {
			t.Fatal(err)
		}
		if err := randmodel.AddGemma4Vision(dir, v, 11, false); err != nil {
			t.Fatal(err)
		}
		vm, err := model.VisionMemoryOf(dir)
		if err != nil {
			t.Fatal(err)
		}
		proc, err := vision.LoadProcessor(dir)
		if err != nil {
			t.Fatal(err)
		}
		// 280×256 pixels: 70×64 patches of 4, the budget's 4,480 exactly.
		img := peakImage(280, 256)
		px, err := proc.Process(img.RGB)
		if err != nil {
			t.Fatal(err)
		}
		if px.Rows != vm.MaxPatches || vm.MaxPatches != v.MaxSoftTokens*v.Pool*v.Pool {
			t.Fatalf("the image has %d patches, the estimate's largest %d: want the budget's %d", px.Rows, vm.MaxPatches, v.MaxSoftTokens*v.Pool*v.Pool)
		}
		cfg, err := model.ReadConfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		vc := gemma4.VisionConfig{Hidden: v.Hidden, Intermediate: v.Intermediate, Layers: v.Layers, Heads: v.Heads, KVHeads: v.KVHeads,
			HeadDim: v.HeadDim, Patch: v.Patch, PosSize: v.PosSize, Pool: v.Pool, Eps: v.Eps, Act: v.Act, Standardize: v.Standardize, Clipped: clipped}
		buffers := gemma4.EncodeBuffers(vc, vm.MaxPatches, v.MaxSoftTokens, cfg.HiddenSize)
		peak := mlxtest.EncodePeak(t, dir, peakImage(32, 24), img)
		modeltest.CheckEncodeBound(t, fmt.Sprintf("%d×%d tower (clamped %v), %d patches", v.Layers, v.Hidden, clipped, vm.MaxPatches),
			peak, buffers, vm.Encode, 3)
	}
}

// peakImage is a w×h image of varied pixels.
func peakImage(w, h int) vision.Image {
	m := vision.NewRGB(w, h)
	for i := range m.Pix {
		m.Pix[i] = uint8(i*7 + i/5)
	}
	return vision.NewImage(m)
}
