package gemma3_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/text/template"
	"github.com/mlxg/mlxg/vision"
)

// visionCheckpoint writes a tiny random Gemma 3 of Gemma 3's vocabulary with a tower, and
// Gemma 3's tokenizer and chat template (which renders an image as <start_of_image>).
func visionCheckpoint(t *testing.T) string {
	t.Helper()
	tok := testdata.Tokenizer(t, "gemma3")
	dir := filepath.Join(t.TempDir(), "gemma3v")
	c := randmodel.TinyGemma3(262208)
	c.HiddenSize, c.IntermediateSize = 64, 96
	if err := randmodel.Generate(dir, c, randmodel.Options{Seed: 5, TokenizerDir: tok}); err != nil {
		t.Fatal(err)
	}
	if err := randmodel.AddGemma3Vision(dir, randmodel.TinyGemma3Vision(), 7, false); err != nil {
		t.Fatal(err)
	}
	return dir
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestEngineImages: requests with 0, 1 and 2 images through the engine in prefill chunks of
// 8 rows (which would cut an image's 16); each gives the tokens of one large chunk, and with
// the prefix cache (RAM, then SSD after a restart) the tokens of no cache, a repeated image
// reusing its blocks and its features; the prompt frames the image as Gemma3Processor does;
// placeholders without images are refused.
func TestEngineImages(t *testing.T) {
	dir := visionCheckpoint(t)
	ref, err := runner.Load(dir, runner.LoadOptions{Threads: 2, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	cacheDir := t.TempDir()
	open := func() (*runner.Engine, *kvstore.PrefixCache) {
		pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: cacheDir, Log: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		e, err := runner.Load(dir, runner.LoadOptions{Threads: 2, Logger: quiet(), Prefix: pc})
		if err != nil {
			t.Fatal(err)
		}
		return e, pc
	}
	e, pc := open()
	imgA, imgB := testImage(64, 48, 1), testImage(40, 40, 2)
	user := func(parts ...any) template.Message { return template.Message{"role": "user", "content": parts} }
	img := map[string]any{"type": "image"}
	txt := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
	o := runner.Greedy()
	o.NumPredict = 6
	o.NumBatch = 8
	whole := o
	whole.NumBatch = 512
	gen := func(e *runner.Engine, opts runner.Options, msgs []template.Message, images ...vision.Image) *runner.Result {
		t.Helper()
		res, err := e.Generate(context.Background(), runner.Request{Messages: msgs, Options: opts, Images: images}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	check := func(name string, msgs []template.Message, images []vision.Image, cached func(int) bool) *runner.Result {
		t.Helper()
		got, want, one := gen(e, o, msgs, images...), gen(ref, o, msgs, images...), gen(ref, whole, msgs, images...)
		if !slices.Equal(got.Tokens, want.Tokens) {
			t.Errorf("%s: %v with the prefix cache, %v without", name, got.Tokens, want.Tokens)
		}
		if !slices.Equal(one.Tokens, want.Tokens) {
			t.Errorf("%s: %v in chunks of 8, %v in one", name, want.Tokens, one.Tokens)
		}
		if got.Prefix == nil || !cached(got.Prefix.Cached) {
			t.Errorf("%s: prefix stats %+v", name, got.Prefix)
		}
		return got
	}
	turn1 := []template.Message{user(img, txt("What is in this picture?"))}
	first := check("one image", turn1, []vision.Image{imgA}, func(n int) bool { return n == 0 })
	plain := gen(ref, o, []template.Message{user(txt("What is in this picture?"))})
	// The image is 16 rows framed by "\n\n", <start_of_image>, <end_of_image>, "\n\n" (the
	// newlines may join the text's own in one token).
	if first.Images != 1 || first.ImageTokens != 16 || first.ImagesEncoded != 1 || first.PromptTokens < plain.PromptTokens+16+2 || first.PromptTokens > plain.PromptTokens+16+4 {
		t.Fatalf("a prompt of %d tokens (%d without the image), %d images of %d tokens, %d encoded", first.PromptTokens, plain.PromptTokens, first.Images, first.ImageTokens, first.ImagesEncoded)
	}
	reply := ref.Tokenizer.Decode(first.Tokens, true)
	turn2 := append(slices.Clone(turn1), template.Message{"role": "assistant", "content": reply}, user(txt("And the colours?")))
	if again := check("the same image again", turn2, []vision.Image{imgA}, func(n int) bool { return n >= first.PromptTokens-1 }); again.ImagesEncoded != 0 {
		t.Errorf("the same image was encoded again (%d): its features are kept by the hash of its pixels", again.ImagesEncoded)
	}
	check("another image", []template.Message{user(img, txt("What is in this picture?"))}, []vision.Image{imgB}, func(n int) bool { return n == 0 })
	check("two images", []template.Message{user(txt("Compare"), img, txt("with"), img)}, []vision.Image{imgA, imgB}, func(int) bool { return true })
	check("no image", []template.Message{user(txt("Hello"))}, nil, func(int) bool { return true })

	// A restart: the blocks come back from SSD.
	e.Close()
	pc.Close()
	e, pc = open()
	defer pc.Close()
	defer e.Close()
	res := check("the same image after a restart", turn2, []vision.Image{imgA}, func(n int) bool { return n >= first.PromptTokens-1 })
	if res.Prefix.DiskHits == 0 {
		t.Errorf("after a restart: %+v, want blocks from SSD", res.Prefix)
	}
	if _, err := e.Generate(context.Background(), runner.Request{Messages: []template.Message{user(img, img)}, Options: o, Images: []vision.Image{imgA}}, nil); !errors.Is(err, runner.ErrImagePlacement) {
		t.Errorf("two placeholders, one image: %v", err)
	}
	if _, err := e.Generate(context.Background(), runner.Request{Messages: []template.Message{user(txt("hi"))}, Options: o, Images: []vision.Image{imgA}}, nil); !errors.Is(err, runner.ErrImagePlacement) {
		t.Errorf("no placeholder: %v", err)
	}
}

// TestEngineImagesBatched: concurrent requests with different images (and one without) in
// one continuous batch give the tokens each gives alone.
func TestEngineImagesBatched(t *testing.T) {
	dir := visionCheckpoint(t)
	alone, err := runner.Load(dir, runner.LoadOptions{Threads: 2, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	batched, err := runner.Load(dir, runner.LoadOptions{Threads: 2, Logger: quiet(), Parallel: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer batched.Close()
	if _, ok := batched.BatchStats(); !ok {
		t.Skip("no continuous batching for this model on this backend")
	}
	o := runner.Greedy()
	o.NumPredict = 8
	o.NumBatch = 8
	msgs := func(parts ...any) []template.Message { return []template.Message{{"role": "user", "content": parts}} }
	img := map[string]any{"type": "image"}
	txt := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
	reqs := []runner.Request{
		{Messages: msgs(img, txt("What is this?")), Images: []vision.Image{testImage(64, 48, 1)}, Options: o},
		{Messages: msgs(txt("Compare"), img, txt("and"), img), Images: []vision.Image{testImage(32, 40, 2), testImage(48, 48, 3)}, Options: o},
		{Messages: msgs(txt("No picture here, just text.")), Options: o},
	}
	want := make([][]int32, len(reqs))
	for i, r := range reqs {
		res, err := alone.Generate(context.Background(), r, nil)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = res.Tokens
	}
	got := make([][]int32, len(reqs))
	errs := make([]error, len(reqs))
	done := make(chan int)
	for i, r := range reqs {
		go func() {
			res, err := batched.Generate(context.Background(), r, nil)
			if err == nil {
				got[i] = res.Tokens
			}
			errs[i] = err
			done <- i
		}()
	}
	for range reqs {
		<-done
	}
	for i := range reqs {
		if errs[i] != nil || !slices.Equal(got[i], want[i]) {
			t.Errorf("request %d: batched %v (%v), alone %v", i, got[i], errs[i], want[i])
		}
	}
}
