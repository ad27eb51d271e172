package gemma3_test

import (
	"testing"

	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/runner/runnertest"
	"github.com/mlxg/mlxg/vision"
)

// TestEngineImagesOnMLX: Gemma 3's tower and its image rows' bidirectional attention on
// MLX (an installed libmlxc) give the CPU backend's greedy tokens for one and two images
// in prefill chunks of 8 rows (an image is 16), and for a second turn that repeats an
// image, its blocks restored from the prefix cache.
func TestEngineImagesOnMLX(t *testing.T) {
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)")
	}
	imgA := testImage(64, 48, 1)
	runnertest.EngineImagesOn(t, mlxtest.Backend(t), runnertest.OnBackend{
		Dir: visionCheckpoint(t), NumPredict: 6, NumBatch: 8,
		Question: "What is in this picture?",
		One:      imgA, Two: [2]vision.Image{imgA, testImage(40, 40, 2)},
		Again: true,
	})
}
