package gemma4_test

import (
	"math"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/runnertest"
	"github.com/mlxg/mlxg/vision"
)

// TestEngineImagesOnMLX: Gemma 4's tower (its 2D RoPE's column slices, clamps and pooling)
// and its image rows' bidirectional attention on MLX (an installed libmlxc), on the layers
// with their own KV and the KV-shared ones, give the CPU backend's greedy tokens for one
// and two images in prefill chunks of 8 rows, and for a second turn that repeats an image,
// its blocks restored from the prefix cache: each token's log-probability within 1e-2 of
// the CPU's, the same token up to a near tie (the CPU's two best within 1e-2), where
// the backends' roundings may pick either and the continuations part.
func TestEngineImagesOnMLX(t *testing.T) {
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)")
	}
	imgA := testImage(24, 20, 1)
	runnertest.EngineImagesOn(t, mlxtest.Backend(t), runnertest.OnBackend{
		Dir: engineCheckpoint(t), NumPredict: 6, NumBatch: 8,
		Question: engineQuestion,
		One:      imgA, Two: [2]vision.Image{imgA, testImage(20, 28, 2)},
		Again:       true,
		TopLogprobs: 2,
		Compare:     nearTie,
	})
}

// nearTie holds the tokens on MLX (got) to the CPU backend's (want): each shared token's
// log-probability within 1e-2, and where they part, the CPU's step a near tie (its two
// best within 1e-2) of which MLX took one.
func nearTie(t *testing.T, name string, got, want *runner.Result) {
	t.Helper()
	if len(got.Logprobs) != len(got.Tokens) || len(want.Logprobs) != len(want.Tokens) {
		t.Fatalf("%s on MLX: %d images, %d tokens with %d log-probabilities", name, got.Images, len(got.Tokens), len(got.Logprobs))
	}
	same := 0
	for same < min(len(got.Tokens), len(want.Tokens)) && got.Tokens[same] == want.Tokens[same] {
		if d := math.Abs(got.Logprobs[same].Logprob - want.Logprobs[same].Logprob); d > 1e-2 {
			t.Errorf("%s on MLX: token %d's log-probability %.4f, on the CPU backend %.4f", name, same, got.Logprobs[same].Logprob, want.Logprobs[same].Logprob)
		}
		same++
	}
	if same < len(want.Tokens) {
		top := want.Logprobs[same].Top
		if len(top) < 2 || top[0].Logprob-top[1].Logprob > 1e-2 || !slices.Contains([]int32{top[0].ID, top[1].ID}, got.Tokens[same]) {
			t.Errorf("%s on MLX: tokens %v; on the CPU backend %v, whose step %d is no near tie (%+v)", name, got.Tokens, want.Tokens, same, top)
		} else {
			t.Logf("%s: the backends part at step %d, a near tie on the CPU backend (%+v)", name, same, top)
		}
	}
}

// TestImageLogitsOnMLX is TestImageLogitsReference on MLX: every row's logits of a prompt
// with two images, without and with KV-shared layers, against the float64 reference of
// transformers' language model with the image mask, and far from it without the mask
// (on the KV-shared layers alone, too); the prefill in passes gives the one pass's rows.
func TestImageLogitsOnMLX(t *testing.T) {
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)")
	}
	for _, tc := range []struct {
		name string
		c    randmodel.Config
	}{{"own KV", refText()}, {"KV-shared", sharedRefText()}} {
		t.Run(tc.name, func(t *testing.T) { testImageLogitsReference(t, tc.c, mlxtest.Backend(t)) })
	}
}
