package gemma4_test

import (
	"context"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/text/template"
	"github.com/mlxg/mlxg/vision"
)

// TestEngineImagesOnMLX: Gemma 4's tower (its 2D RoPE's column slices, clamps and pooling)
// and its image rows' bidirectional attention on MLX (an installed libmlxc) give the CPU
// backend's greedy tokens for one and two images in prefill chunks of 8 rows, and for a
// second turn that repeats an image, its blocks restored from the prefix cache.
func TestEngineImagesOnMLX(t *testing.T) {
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)")
	}
	dir := engineCheckpoint(t)
	ref, err := runner.Load(dir, runner.LoadOptions{Threads: 2, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	e, err := runner.Load(dir, runner.LoadOptions{Backend: mlxtest.Backend(t), Logger: quiet(), Prefix: pc})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Model.Vision() == nil {
		t.Fatal("the tower was not bound on MLX")
	}
	o := runner.Greedy()
	o.NumPredict = 6
	o.NumBatch = 8
	user := func(parts ...any) template.Message { return template.Message{"role": "user", "content": parts} }
	img := map[string]any{"type": "image"}
	txt := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
	imgA, imgB := testImage(24, 20, 1), testImage(20, 28, 2)
	question := "What is in this picture? Describe it in some detail, with its colours, its shapes and anything else you notice."
	turn1 := []template.Message{user(img, txt(question))}
	var reply string
	for _, c := range []struct {
		name   string
		msgs   func() []template.Message
		images []vision.Image
	}{
		{"one image", func() []template.Message { return turn1 }, []vision.Image{imgA}},
		{"two images", func() []template.Message {
			return []template.Message{user(txt("Compare"), img, txt("with"), img)}
		}, []vision.Image{imgA, imgB}},
		{"the first image again", func() []template.Message {
			return append(slices.Clone(turn1), template.Message{"role": "assistant", "content": reply}, user(txt("And the colours?")))
		}, []vision.Image{imgA}},
	} {
		req := runner.Request{Messages: c.msgs(), Options: o, Images: c.images}
		want, err := ref.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatalf("%s on MLX: %v", c.name, err)
		}
		if !slices.Equal(got.Tokens, want.Tokens) || got.Images != len(c.images) {
			t.Errorf("%s on MLX: tokens %v, %d images; on the CPU backend %v", c.name, got.Tokens, got.Images, want.Tokens)
		}
		if reply == "" {
			reply = ref.Tokenizer.Decode(want.Tokens, true)
		}
		t.Logf("%s: %d prompt tokens, %d cached", c.name, got.PromptTokens, got.Prefix.Cached)
	}
}
