package qwen25vl_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
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

// visionTemplate renders content parts as Qwen2.5-VL's template does: an image part as
// <|vision_start|><|image_pad|><|vision_end|>, text parts as they are.
const visionTemplate = `{%- for message in messages -%}<|im_start|>{{ message.role }}
{% if message.content is string %}{{ message.content }}{% else %}{% for item in message.content %}{% if item.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% elif item.type == 'text' %}{{ item.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>
{% endfor -%}{%- if add_generation_prompt -%}<|im_start|>assistant
{% endif -%}`

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
	tc["chat_template"] = visionTemplate
	b, _ = json.Marshal(tc)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestEngineImages: requests with 0, 1 and 2 images through the engine with a prefix
// cache give the tokens of an engine without one; a conversation that repeats an image
// restores its blocks and does not encode it again; another image restores none of its.
func TestEngineImages(t *testing.T) {
	dir := engineCheckpoint(t)
	ref, err := runner.Load(dir, runner.LoadOptions{Threads: 2, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: t.TempDir(), Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	e, err := runner.Load(dir, runner.LoadOptions{Threads: 2, Logger: quiet(), Prefix: pc})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	imgA, imgB := testImage(40, 48, 1), testImage(40, 48, 2)
	user := func(parts ...any) template.Message { return template.Message{"role": "user", "content": parts} }
	img := map[string]any{"type": "image"}
	txt := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
	o := runner.Greedy()
	o.NumPredict = 6
	o.NumBatch = 16 // chunks that would cut through the images
	gen := func(e *runner.Engine, msgs []template.Message, images ...vision.Image) *runner.Result {
		t.Helper()
		res, err := e.Generate(context.Background(), runner.Request{Messages: msgs, Options: o, Images: images}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	check := func(name string, msgs []template.Message, images []vision.Image, cached func(int) bool) *runner.Result {
		t.Helper()
		got, want := gen(e, msgs, images...), gen(ref, msgs, images...)
		if !slices.Equal(got.Tokens, want.Tokens) {
			t.Errorf("%s: %v with the prefix cache, %v without", name, got.Tokens, want.Tokens)
		}
		if got.Prefix == nil || !cached(got.Prefix.Cached) {
			t.Errorf("%s: prefix stats %+v", name, got.Prefix)
		}
		return got
	}
	// 30 image rows (6×5).
	turn1 := []template.Message{user(img, txt("What is in this picture?"))}
	first := check("one image", turn1, []vision.Image{imgA}, func(n int) bool { return n == 0 })
	if first.Images != 1 || first.ImageTokens != 30 || first.ImagesEncoded != 1 {
		t.Fatalf("%d images of %d tokens, %d encoded: want 1 image of 30 tokens, encoded", first.Images, first.ImageTokens, first.ImagesEncoded)
	}
	reply := ref.Tokenizer.Decode(first.Tokens, true)
	turn2 := append(slices.Clone(turn1), template.Message{"role": "assistant", "content": reply}, user(txt("And the colours?")))
	if again := check("the same image again", turn2, []vision.Image{imgA}, func(n int) bool { return n >= first.PromptTokens-1 }); again.ImagesEncoded != 0 {
		t.Errorf("the same image was encoded again (%d)", again.ImagesEncoded)
	}
	check("another image", turn1, []vision.Image{imgB}, func(n int) bool { return n == 0 })
	check("two images", []template.Message{user(txt("Compare"), img, txt("with"), img)}, []vision.Image{imgA, imgB}, func(int) bool { return true })
	check("no image", []template.Message{user(txt("Hello"))}, nil, func(int) bool { return true })
}

// TestEngineImagesBatched: concurrent requests with different images (and one without) in
// one continuous batch give the tokens each gives alone.
func TestEngineImagesBatched(t *testing.T) {
	dir := engineCheckpoint(t)
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
		t.Fatal("no continuous batching for qwen2_5_vl on the CPU backend")
	}
	o := runner.Greedy()
	o.NumPredict = 8
	msgs := func(parts ...any) []template.Message { return []template.Message{{"role": "user", "content": parts}} }
	img := map[string]any{"type": "image"}
	txt := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
	reqs := []runner.Request{
		{Messages: msgs(img, txt("What is this?")), Images: []vision.Image{testImage(40, 48, 1)}, Options: o},
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
