package gemma3_test

import (
	"fmt"
	"testing"

	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/runner/gemma3"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// TestVisionMemoryOnMLX: on MLX (an installed libmlxc), encoding an image (every image is
// resized to image_size², here 4,096 patches) holds no more than the memory plan's estimate
// of the backend's arrays above the weights (so within the plan's encode peak), and the
// plan's figure is within 3 times what MLX held, for a tower of 2 blocks 128 wide whose
// activations outweigh its weights many times.
func TestVisionMemoryOnMLX(t *testing.T) {
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc")
	}
	v := smallVision()
	v.ImageSize, v.Patch, v.Tokens = 256, 4, 256
	v.Hidden, v.Intermediate, v.Heads, v.Layers = 128, 512, 4, 2
	m := visionModelWith(t, v, 2)
	vm, err := model.VisionMemoryOf(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if vm.MaxPatches != 4096 {
		t.Fatalf("%d patches an image, want 4096", vm.MaxPatches)
	}
	vc := gemma3.VisionConfig{Hidden: v.Hidden, Intermediate: v.Intermediate, Layers: v.Layers, Heads: v.Heads, Channels: v.Channels,
		ImageSize: v.ImageSize, Patch: v.Patch, Eps: v.Eps, Act: v.Act}
	peak := mlxtest.EncodePeak(t, m.Dir, testImage(32, 32, 3), testImage(300, 200, 4))
	modeltest.CheckEncodeBound(t, fmt.Sprintf("%d×%d tower, %d patches", v.Layers, v.Hidden, vm.MaxPatches),
		peak, gemma3.EncodeBuffers(vc, vm.MaxPatches, v.Tokens, m.Config.HiddenSize), vm.Encode, 3)
}
