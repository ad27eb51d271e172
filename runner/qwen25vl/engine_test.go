package qwen25vl_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/runnertest"
)

// engineCheckpoint writes a tiny random Qwen2.5-VL with Qwen's tokenizer and a chat
// template that places images.
func engineCheckpoint(t *testing.T) string {
	t.Helper()
	tok := testdata.Tokenizer(t, "qwen3")
	dir := filepath.Join(t.TempDir(), "vl")
	c := randmodel.Tiny("qwen2", 151936)
	c.TieWordEmbeddings = true
	if err := randmodel.Generate(dir, c, randmodel.Options{Seed: 5, TokenizerDir: tok}); err != nil {
		t.Fatal(err)
	}
	if err := randmodel.AddQwen25Vision(dir, randmodel.TinyQwen25Vision(), 7); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tokenizer_config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tc map[string]any
	if err := json.Unmarshal(b, &tc); err != nil {
		t.Fatal(err)
	}
	tc["chat_template"] = randmodel.QwenVisionTemplate
	b, _ = json.Marshal(tc)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEngineImages: requests with 0, 1 and 2 images through the engine with a prefix
// cache, in prefill chunks of 16 rows that cut through the images, give the tokens of an
// engine without one; a conversation that repeats an image restores its blocks and does
// not encode it again; another image restores none of its.
func TestEngineImages(t *testing.T) {
	runnertest.EngineImages(t, runnertest.Images{
		Dir: engineCheckpoint(t), A: testImage(40, 48, 1), B: testImage(40, 48, 2),
		NumPredict: 6, NumBatch: 16,
		Question:    "What is in this picture?",
		ImageTokens: 30, // 6×5 rows
	})
}

// TestEngineImagesBatched: concurrent requests with different images (and one without) in
// one continuous batch give the tokens each gives alone.
func TestEngineImagesBatched(t *testing.T) {
	runnertest.EngineImagesBatched(t, runnertest.Batched{Dir: engineCheckpoint(t), First: testImage(40, 48, 1), MustBatch: true})
}
