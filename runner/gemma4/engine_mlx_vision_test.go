package gemma4_test

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/text/template"
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
		req := runner.Request{Messages: c.msgs(), Options: o, Images: c.images, Logprobs: true, TopLogprobs: 2}
		want, err := ref.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatalf("%s on MLX: %v", c.name, err)
		}
		if got.Images != len(c.images) || len(got.Logprobs) != len(got.Tokens) || len(want.Logprobs) != len(want.Tokens) {
			t.Fatalf("%s on MLX: %d images, %d tokens with %d log-probabilities", c.name, got.Images, len(got.Tokens), len(got.Logprobs))
		}
		same := 0
		for same < min(len(got.Tokens), len(want.Tokens)) && got.Tokens[same] == want.Tokens[same] {
			if d := math.Abs(got.Logprobs[same].Logprob - want.Logprobs[same].Logprob); d > 1e-2 {
				t.Errorf("%s on MLX: token %d's log-probability %.4f, on the CPU backend %.4f", c.name, same, got.Logprobs[same].Logprob, want.Logprobs[same].Logprob)
			}
			same++
		}
		if same < len(want.Tokens) {
			top := want.Logprobs[same].Top
			if len(top) < 2 || top[0].Logprob-top[1].Logprob > 1e-2 || !slices.Contains([]int32{top[0].ID, top[1].ID}, got.Tokens[same]) {
				t.Errorf("%s on MLX: tokens %v; on the CPU backend %v, whose step %d is no near tie (%+v)", c.name, got.Tokens, want.Tokens, same, top)
			} else {
				t.Logf("%s: the backends part at step %d, a near tie on the CPU backend (%+v)", c.name, same, top)
			}
		}
		if reply == "" {
			reply = ref.Tokenizer.Decode(want.Tokens, true)
		}
		t.Logf("%s: %d prompt tokens, %d cached", c.name, got.PromptTokens, got.Prefix.Cached)
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
