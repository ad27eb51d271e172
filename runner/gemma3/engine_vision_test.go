package gemma3_test

import (
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/runnertest"
)

// visionCheckpoint writes a tiny random Gemma 3 of Gemma 3's vocabulary with a tower, and
// Gemma 3's tokenizer and chat template (which renders an image as <start_of_image>).
func visionCheckpoint(t testing.TB) string {
	return visionCheckpointWith(t, randmodel.TinyGemma3Vision())
}

// visionCheckpointWith is visionCheckpoint with a tower of shape v.
func visionCheckpointWith(t testing.TB, v randmodel.Gemma3Vision) string {
	t.Helper()
	tok := testdata.Tokenizer(t, "gemma3")
	dir := filepath.Join(t.TempDir(), "gemma3v")
	c := randmodel.TinyGemma3(262208)
	c.HiddenSize, c.IntermediateSize = 64, 96
	if err := randmodel.Generate(dir, c, randmodel.Options{Seed: 5, TokenizerDir: tok}); err != nil {
		t.Fatal(err)
	}
	if err := randmodel.AddGemma3Vision(dir, v, 7, false); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEngineImages: requests with 0, 1 and 2 images through the engine in prefill chunks of
// 8 rows (which would cut an image's 16); each gives the tokens of one large chunk, and with
// the prefix cache (RAM, then SSD after a restart) the tokens of no cache, a repeated image
// reusing its blocks and its features; the prompt frames the image as Gemma3Processor does;
// placeholders without images are refused.
func TestEngineImages(t *testing.T) {
	runnertest.EngineImages(t, runnertest.Images{
		Dir: visionCheckpoint(t), A: testImage(64, 48, 1), B: testImage(40, 40, 2),
		NumPredict: 6, NumBatch: 8, OnePass: true,
		Question: "What is in this picture?",
		// The image is 16 rows framed by "\n\n", <start_of_image>, <end_of_image>, "\n\n"
		// (the newlines may join the text's own in one token).
		ImageTokens: 16, Frame: [2]int{2, 4},
		Restart: true, Refusals: runnertest.RefuseNoPlaceholder,
	})
}

// TestEngineImagesBatched: concurrent requests with different images (and one without) in
// one continuous batch give the tokens each gives alone.
func TestEngineImagesBatched(t *testing.T) {
	runnertest.EngineImagesBatched(t, runnertest.Batched{Dir: visionCheckpoint(t), First: testImage(64, 48, 1), NumBatch: 8})
}
