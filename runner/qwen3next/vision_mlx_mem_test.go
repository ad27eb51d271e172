package qwen3next_test

import (
	"fmt"
	"testing"

	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/qwen3next"
)

// TestVisionMemoryOnMLX: on MLX (an installed libmlxc), encoding the processor's largest
// image holds no more than the memory plan's estimate of the backend's arrays above the
// weights (so within the plan's encode peak), and the plan's figure is within 3 times
// what MLX held, for towers whose activations outweigh their weights many times: 4,096
// and 16,384 patches through 2 blocks 128 wide.
func TestVisionMemoryOnMLX(t *testing.T) {
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc")
	}
	for _, side := range []int{256, 512} {
		v := wideTower()
		v.MaxPixels = side * side
		m := visionModelWith(t, v)
		vm, err := model.VisionMemoryOf(m.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if want := side * side / (v.Patch * v.Patch); vm.MaxPatches != want {
			t.Fatalf("%d patches at most, want %d", vm.MaxPatches, want)
		}
		vc := qwen3next.VisionConfig{Depth: v.Depth, Hidden: v.Hidden, Intermediate: v.Intermediate, Heads: v.Heads, InChannels: v.InChannels,
			Patch: v.Patch, Merge: v.Merge, Temporal: v.Temporal, Out: m.Config.HiddenSize}
		peak := mlxtest.EncodePeak(t, m.Dir, testImage(32, 32, 3), testImage(side, side, 4))
		modeltest.CheckEncodeBound(t, fmt.Sprintf("%d×%d tower, %d patches", v.Depth, v.Hidden, vm.MaxPatches),
			peak, qwen3next.EncodeBuffers(vc, vm.MaxPatches), vm.Encode, 3)
	}
}
