package qwen25vl_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/qwen25vl"
	"github.com/mlxg/mlxg/vision"
)

// TestVisionMemoryOnMLX: on MLX (an installed libmlxc), encoding the processor's largest
// image holds no more than the memory plan's estimate of the backend's arrays above the
// weights (so within the plan's encode peak), and the plan's figure is within 3 times what
// MLX held, for a tower whose activations outweigh its weights many times: 4,096 and 16,384
// patches through a windowed block and a full one, 128 wide.
func TestVisionMemoryOnMLX(t *testing.T) {
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc")
	}
	for _, side := range []int{256, 512} {
		v := randmodel.TinyQwen25Vision()
		v.Depth, v.Hidden, v.Intermediate, v.Heads, v.FullAttn = 2, 128, 256, 4, []int{1}
		v.MaxPixels = side * side
		dir := filepath.Join(t.TempDir(), "vl")
		if err := randmodel.Generate(dir, randmodel.Tiny("qwen2", 512), randmodel.Options{Seed: 5}); err != nil {
			t.Fatal(err)
		}
		if err := randmodel.AddQwen25Vision(dir, v, 7); err != nil {
			t.Fatal(err)
		}
		vm, err := model.VisionMemoryOf(dir)
		if err != nil {
			t.Fatal(err)
		}
		if want := side * side / (v.Patch * v.Patch); vm.MaxPatches != want {
			t.Fatalf("%d patches at most, want %d", vm.MaxPatches, want)
		}
		cfg, err := model.ReadConfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		vc := qwen25vl.VisionConfig{Depth: v.Depth, Hidden: v.Hidden, Act: v.Act, Intermediate: v.Intermediate, Heads: v.Heads, InChannels: v.InChannels,
			Patch: v.Patch, Merge: v.Merge, Temporal: v.Temporal, Out: cfg.HiddenSize, Window: v.Window, FullAttn: v.FullAttn}
		peak := mlxtest.EncodePeak(t, dir, peakImage(32, 32), peakImage(side, side))
		modeltest.CheckEncodeBound(t, fmt.Sprintf("%d×%d tower, %d patches", v.Depth, v.Hidden, vm.MaxPatches),
			peak, qwen25vl.EncodeBuffers(vc, vm.MaxPatches), vm.Encode, 3)
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
