package gemma4_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/runnertest"
)

// engineQuestion is the text after the image in the engine tests.
const engineQuestion = "What is in this picture? Describe it in some detail, with its colours, its shapes and anything else you notice."

// engineCheckpoint writes a tiny random multimodal Gemma 4 of Gemma 3's vocabulary (its
// tokenizer) with a TinyGemma4Vision tower (its linears clipped) whose image tokens are
// Gemma 3's, and randmodel.Gemma4StandInTemplate as its chat template.
func engineCheckpoint(t testing.TB) string {
	t.Helper()
	tok := testdata.Tokenizer(t, "gemma3")
	dir := filepath.Join(t.TempDir(), "gemma4v")
	c := visionText()
	c.VocabSize, c.PerLayerInput = 262208, 4
	if err := randmodel.Generate(dir, c, randmodel.Options{Seed: 5, TokenizerDir: tok}); err != nil {
		t.Fatal(err)
	}
	v := randmodel.TinyGemma4Vision()
	v.Image, v.BOI, v.EOI = randmodel.Gemma3Image, randmodel.Gemma3BOI, randmodel.Gemma3EOI
	v.Clipped = true
	if err := randmodel.AddGemma4Vision(dir, v, 7, false); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte(randmodel.Gemma4StandInTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEngineImages: requests with 0, 1 and 2 images through the engine in prefill chunks of
// 8 rows (which would cut an image's rows); each gives the tokens of one large chunk, and
// with the prefix cache the tokens of no cache, a repeated image reusing its blocks and its
// features; the placeholder is framed as Gemma4Processor frames it (<|image>, the image's
// tokens, <image|>); placeholders without images are refused.
func TestEngineImages(t *testing.T) {
	runnertest.EngineImages(t, runnertest.Images{
		Dir: engineCheckpoint(t), A: testImage(24, 20, 1), B: testImage(20, 28, 2),
		NumPredict: 5, NumBatch: 8, OnePass: true,
		// Long enough that the prefix cache's blocks reach past the image (a hit never ends
		// inside an image's rows).
		Question: engineQuestion,
		// The placeholder becomes <start_of_image>, the image's rows (as many as the
		// processor gives its size), <end_of_image>.
		Frame: [2]int{2, 2},
		// Another image in its place may restore the blocks before it.
		AnotherBelowImage: true,
		Refusals:          runnertest.RefuseExtraHolder,
	})
}
