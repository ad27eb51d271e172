package qwen3next_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/runnertest"
	"github.com/mlxg/mlxg/vision"
)

// visionCheckpoint writes a tiny random Qwen3.5 with a tower, Qwen's tokenizer and a
// chat template that places images.
func visionCheckpoint(t testing.TB) string {
	return visionCheckpointWith(t, randmodel.TinyQwenVision())
}

// visionCheckpointWith is visionCheckpoint with a tower of shape v.
func visionCheckpointWith(t testing.TB, v randmodel.QwenVision) string {
	t.Helper()
	tok := testdata.Tokenizer(t, "qwen3")
	dir := t.TempDir()
	hf, mlx, dst := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx"), filepath.Join(dir, "qwen35v")
	c := randmodel.TinyQwen3Next(151936)
	c.TieWordEmbeddings = true
	if err := randmodel.Generate(hf, c, randmodel.Options{Seed: 5, TokenizerDir: tok}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, mlx, create.Options{}); err != nil {
		t.Fatal(err)
	}
	qwen35Layout(t, mlx, dst, 2, 4, 32, 32)
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
		b, err := os.ReadFile(filepath.Join(mlx, name))
		if err != nil {
			continue
		}
		if name == "tokenizer_config.json" {
			var tc map[string]any
			if err := json.Unmarshal(b, &tc); err != nil {
				t.Fatal(err)
			}
			tc["chat_template"] = randmodel.QwenVisionTemplate
			b, _ = json.Marshal(tc)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addVision(t, dst, v)
	return dst
}

// TestEngineImages: requests with 0, 1 and 2 images through the engine in prefill chunks
// of 16 rows (which cut through the images); the prefix cache (RAM, then SSD after a
// restart) gives a conversation that repeats an image its blocks, and the tokens of no
// cache; another image in the same place restores nothing of the image (media ids from its
// pixels); a conversation over num_ctx drops its oldest image; placeholders without images
// are refused.
func TestEngineImages(t *testing.T) {
	runnertest.EngineImages(t, runnertest.Images{
		Dir: visionCheckpoint(t), A: testImage(64, 48, 1), B: testImage(64, 48, 2),
		NumPredict: 6, NumBatch: 16,
		Question: "What is in this picture?",
		// 48 image rows (8×6) in a prompt of some 70.
		ImageTokens: 48,
		Swap:        true, Restart: true, NumCtx: 100, Refusals: runnertest.RefuseNoPlaceholder,
	})
}

// TestEngineImagesBatched: concurrent requests with different images (and one without)
// in one continuous batch give the tokens each gives alone.
func TestEngineImagesBatched(t *testing.T) {
	runnertest.EngineImagesBatched(t, runnertest.Batched{Dir: visionCheckpoint(t), First: testImage(64, 48, 1)})
}

// TestEngineImagesOnMLX: the vision tower and the M-RoPE rows on MLX (an installed
// libmlxc) read one and two images as the CPU backend does, in prefill chunks of 16 rows
// that cut through the images: the same greedy tokens, each image counted and encoded.
func TestEngineImagesOnMLX(t *testing.T) {
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)")
	}
	runnertest.EngineImagesOn(t, mlxtest.Backend(t), runnertest.OnBackend{
		Dir: visionCheckpoint(t), NumPredict: 6, NumBatch: 16,
		Question: "What is in this picture?",
		One:      testImage(64, 48, 1), Two: [2]vision.Image{testImage(64, 48, 3), testImage(48, 64, 4)},
		Encoded: true,
	})
}
