package qwen3next_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/text/template"
	"github.com/mlxg/mlxg/vision"
)

// visionTemplate renders content parts as Qwen3.5's template does: an image part as
// <|vision_start|><|image_pad|><|vision_end|>, text parts as they are.
const visionTemplate = `{%- for message in messages -%}<|im_start|>{{ message.role }}
{% if message.content is string %}{{ message.content }}{% else %}{% for item in message.content %}{% if item.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% elif item.type == 'text' %}{{ item.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>
{% endfor -%}{%- if add_generation_prompt -%}<|im_start|>assistant
{% endif -%}`

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
			tc["chat_template"] = visionTemplate
			b, _ = json.Marshal(tc)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dst, "config.json")
	raw, _ := os.ReadFile(path)
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["text_config"].(map[string]any)["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 1e6,
		"partial_rotary_factor": 0.25, "mrope_section": []int{3, 3, 2}, "mrope_interleaved": true}
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := randmodel.AddQwenVision(dst, v, 7); err != nil {
		t.Fatal(err)
	}
	return dst
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestEngineImages: requests with 0, 1 and 2 images through the engine; the prefix cache
// (RAM, then SSD after a restart) gives a conversation that repeats an image its blocks,
// and the tokens of no cache; another image in the same place restores nothing of the
// image (media ids from its pixels); placeholders without images are refused.
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
	imgA, imgB := testImage(64, 48, 1), testImage(64, 48, 2)
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
	// 48 image rows (8×6) in a prompt of some 70.
	turn1 := []template.Message{user(img, txt("What is in this picture?"))}
	first := check("one image", turn1, []vision.Image{imgA}, func(n int) bool { return n == 0 })
	if first.PromptTokens < 48 || first.Images != 1 || first.ImageTokens != 48 || first.ImagesEncoded != 1 {
		t.Fatalf("a prompt of %d tokens, %d images of %d tokens, %d encoded: want 1 image of 48 tokens, encoded", first.PromptTokens, first.Images, first.ImageTokens, first.ImagesEncoded)
	}
	reply := ref.Tokenizer.Decode(first.Tokens, true)
	turn2 := append(slices.Clone(turn1), template.Message{"role": "assistant", "content": reply}, user(txt("And the colours?")))
	if again := check("the same image again", turn2, []vision.Image{imgA}, func(n int) bool { return n >= first.PromptTokens-1 }); again.ImagesEncoded != 0 {
		t.Errorf("the same image was encoded again (%d): its features are kept by the hash of its pixels", again.ImagesEncoded)
	}
	check("another image", []template.Message{user(img, txt("What is in this picture?"))}, []vision.Image{imgB}, func(n int) bool { return n == 0 })
	check("two images", []template.Message{user(txt("Compare"), img, txt("with"), img)}, []vision.Image{imgA, imgB}, func(int) bool { return true })
	check("no image", []template.Message{user(txt("Hello"))}, nil, func(int) bool { return true })

	// The same conversation going on with image A, then with image B in its place: B's
	// prompt restores only what precedes the image (the text turn's end), A's all of its own.
	talk := []template.Message{user(txt("Here is a long question about pictures that I will ask you next."))}
	t1 := check("text first", talk, nil, func(int) bool { return true })
	talk = append(talk, template.Message{"role": "assistant", "content": ref.Tokenizer.Decode(t1.Tokens, true)})
	withA := append(slices.Clone(talk), user(img, txt("This one.")))
	a := check("then image A", withA, []vision.Image{imgA}, func(n int) bool { return n >= t1.PromptTokens-1 })
	withB := append(slices.Clone(talk), user(img, txt("This one.")))
	check("then image B instead", withB, []vision.Image{imgB}, func(n int) bool { return n >= t1.PromptTokens-1 && n < a.PromptTokens-1-48 })
	check("image A again", withA, []vision.Image{imgA}, func(n int) bool { return n >= a.PromptTokens-1 })

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

	// The oldest images go with messages the template no longer renders; a placeholder
	// without an image, or images without a placeholder, are errors.
	check("an older image dropped", turn1, []vision.Image{imgB, imgA}, func(n int) bool { return n >= first.PromptTokens-1 })
	// Truncation counts an image as its tokens: a conversation over num_ctx drops its oldest
	// turns (and their images) instead of failing after the images are placed.
	small := o
	small.NumCtx = 100
	long := []template.Message{user(img, txt("First picture.")), {"role": "assistant", "content": "A picture."}, user(img, txt("Second picture."))}
	res2, err := e.Generate(context.Background(), runner.Request{Messages: long, Options: small, Images: []vision.Image{imgA, imgB}}, nil)
	if err != nil || res2.MessagesDropped == 0 || res2.Images != 1 || res2.PromptTokens > 100 {
		t.Errorf("two 48-token images in num_ctx 100: %v, %+v", err, res2)
	}
	if _, err := e.Generate(context.Background(), runner.Request{Messages: []template.Message{user(img, img)}, Options: o, Images: []vision.Image{imgA}}, nil); !errors.Is(err, runner.ErrImagePlacement) {
		t.Errorf("two placeholders, one image: %v", err)
	}
	if _, err := e.Generate(context.Background(), runner.Request{Messages: []template.Message{user(txt("hi"))}, Options: o, Images: []vision.Image{imgA}}, nil); !errors.Is(err, runner.ErrImagePlacement) {
		t.Errorf("no placeholder: %v", err)
	}
}

// TestEngineImagesBatched: concurrent requests with different images (and one without)
// in one continuous batch give the tokens each gives alone.
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
	msgs := func(parts ...any) []template.Message {
		return []template.Message{{"role": "user", "content": parts}}
	}
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

// TestEngineImagesOnMLX: the vision tower and the M-RoPE rows on MLX (an installed
// libmlxc) read one and two images as the CPU backend does: the same greedy tokens, the
// image counted and encoded.
func TestEngineImagesOnMLX(t *testing.T) {
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)")
	}
	dir := visionCheckpoint(t)
	ref, err := runner.Load(dir, runner.LoadOptions{Threads: 2, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	e, err := runner.Load(dir, runner.LoadOptions{Backend: mlxtest.Backend(t), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	o := runner.Greedy()
	o.NumPredict = 6
	o.NumBatch = 16 // chunks that cut through the images
	img := map[string]any{"type": "image"}
	txt := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
	for _, c := range []struct {
		name   string
		parts  []any
		images []vision.Image
	}{
		{"one image", []any{img, txt("What is in this picture?")}, []vision.Image{testImage(64, 48, 1)}},
		{"two images", []any{txt("Compare"), img, txt("with"), img}, []vision.Image{testImage(64, 48, 3), testImage(48, 64, 4)}},
	} {
		req := runner.Request{Messages: []template.Message{{"role": "user", "content": c.parts}}, Options: o, Images: c.images}
		want, err := ref.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatalf("%s on MLX: %v", c.name, err)
		}
		if !slices.Equal(got.Tokens, want.Tokens) || got.Images != len(c.images) || got.ImagesEncoded != len(c.images) {
			t.Errorf("%s on MLX: tokens %v, %d images (%d encoded); on the CPU backend %v", c.name, got.Tokens, got.Images, got.ImagesEncoded, want.Tokens)
		}
	}
}
