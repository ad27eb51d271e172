// Package runnertest holds the engine-level tests that every architecture with a vision
// tower runs on its own tiny checkpoint: requests with images through runner.Engine with and
// without the prefix cache, in prefill chunks and in one pass, in one continuous batch, on
// another backend against the CPU one; and the benchmark of what an image costs a request.
// Each family's test states only what differs (its checkpoint, images, chunk size, how many
// rows an image fills and the checks its design allows).
//
// Only tests import it. It imports runner, so runner's own tests cannot (they use
// runner/model/modeltest). It opens no backend itself: runner.Load gives the CPU one, and a
// test on MLX passes its backend in.
package runnertest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/text/template"
	"github.com/mlxg/mlxg/vision"
)

// Quiet is a logger that drops everything, for engines under test.
func Quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// User is a user message of content parts (Img, Txt).
func User(parts ...any) template.Message { return template.Message{"role": "user", "content": parts} }

// Img is an image content part: the chat template renders its placeholder.
var Img = map[string]any{"type": "image"}

// Txt is a text content part.
func Txt(s string) map[string]any { return map[string]any{"type": "text", "text": s} }

// Refusals are the requests whose images and placeholders disagree that EngineImages
// expects runner.ErrImagePlacement for.
type Refusals int

const (
	RefuseNone          Refusals = iota
	RefuseExtraHolder            // two placeholders, one image
	RefuseNoPlaceholder          // two placeholders, one image; and an image without a placeholder
)

// Images is what EngineImages runs on: a family's checkpoint and what its design gives.
type Images struct {
	Dir        string       // the checkpoint: a tiny model with a tower, a tokenizer and a template that places images
	A, B       vision.Image // two images; A is repeated, B takes its place
	NumPredict int          // greedy tokens a request generates
	NumBatch   int          // prefill rows a step: fewer than an image's, so that chunks cut through images
	Question   string       // the text after the image; long enough that the prefix cache's blocks reach past the image where a hit must not end inside one

	// OnePass also runs every request in one prefill pass (num_batch 512), which must give
	// the tokens of the chunks.
	OnePass bool
	// ImageTokens is the rows A fills; 0 takes the tower's processor's count for A (where
	// it varies with the image's size).
	ImageTokens int
	// Frame, when set, is the fewest and most tokens the placeholder adds beside A's rows
	// (against the question without the image); zero: not checked.
	Frame [2]int
	// AnotherBelowImage: B in A's place may restore what precedes the image (fewer tokens
	// than A's rows); otherwise it restores nothing.
	AnotherBelowImage bool
	// Swap runs a conversation that goes on with A, then with B in its place: B restores
	// only what precedes the image, A again all of its own.
	Swap bool
	// Restart closes the engine and its prefix cache and reopens them on the same SSD
	// directory: the repeated image's blocks must come back from SSD.
	Restart bool
	// NumCtx, when set, is a context into which a conversation with two images of A's rows
	// does not fit: truncation drops its oldest turn (and image) instead of failing; and
	// images beyond the placeholders (the oldest dropped by the template) are ignored.
	NumCtx   int
	Refusals Refusals
}

// EngineImages: requests with 0, 1 and 2 images through the engine in prefill chunks of
// NumBatch rows give, with a prefix cache (RAM, and SSD where Restart), the tokens of an
// engine without one (and, where OnePass, of one prefill pass); a repeated image reuses its
// blocks and is not encoded again; another image in its place restores none of its rows;
// each image fills ImageTokens rows, framed as Frame says.
func EngineImages(t *testing.T, c Images) {
	t.Helper()
	ref, err := runner.Load(c.Dir, runner.LoadOptions{Threads: 2, Logger: Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	cacheDir := t.TempDir()
	open := func() (*runner.Engine, *kvstore.PrefixCache) {
		pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: cacheDir, Log: Quiet()})
		if err != nil {
			t.Fatal(err)
		}
		e, err := runner.Load(c.Dir, runner.LoadOptions{Threads: 2, Logger: Quiet(), Prefix: pc})
		if err != nil {
			t.Fatal(err)
		}
		return e, pc
	}
	e, pc := open()
	defer func() {
		e.Close()
		pc.Close()
	}()
	imgA, imgB := c.A, c.B
	o := runner.Greedy()
	o.NumPredict = c.NumPredict
	o.NumBatch = c.NumBatch
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
		got, want := gen(e, o, msgs, images...), gen(ref, o, msgs, images...)
		if !slices.Equal(got.Tokens, want.Tokens) {
			t.Errorf("%s: %v with the prefix cache, %v without", name, got.Tokens, want.Tokens)
		}
		if c.OnePass {
			if one := gen(ref, whole, msgs, images...); !slices.Equal(one.Tokens, want.Tokens) {
				t.Errorf("%s: %v in chunks of %d, %v in one", name, want.Tokens, o.NumBatch, one.Tokens)
			}
		}
		if got.Prefix == nil || !cached(got.Prefix.Cached) {
			t.Errorf("%s: prefix stats %+v", name, got.Prefix)
		}
		return got
	}
	nA := c.ImageTokens
	if nA == 0 {
		nA = ref.Model.Vision().Processor().ImageTokens(imgA.W, imgA.H)
	}
	turn1 := []template.Message{User(Img, Txt(c.Question))}
	first := check("one image", turn1, []vision.Image{imgA}, func(n int) bool { return n == 0 })
	if first.Images != 1 || first.ImageTokens != nA || first.ImagesEncoded != 1 || first.PromptTokens < nA {
		t.Fatalf("a prompt of %d tokens, %d images of %d tokens, %d encoded: want 1 image of %d tokens, encoded",
			first.PromptTokens, first.Images, first.ImageTokens, first.ImagesEncoded, nA)
	}
	if c.Frame != [2]int{} {
		plain := gen(ref, o, []template.Message{User(Txt(c.Question))})
		if extra := first.PromptTokens - plain.PromptTokens - nA; extra < c.Frame[0] || extra > c.Frame[1] {
			t.Fatalf("a prompt of %d tokens, %d without the image of %d rows: the placeholder adds %d tokens beside the rows, want %d to %d",
				first.PromptTokens, plain.PromptTokens, nA, extra, c.Frame[0], c.Frame[1])
		}
	}
	reply := ref.Tokenizer.Decode(first.Tokens, true)
	turn2 := append(slices.Clone(turn1), template.Message{"role": "assistant", "content": reply}, User(Txt("And the colours?")))
	if again := check("the same image again", turn2, []vision.Image{imgA}, func(n int) bool { return n >= first.PromptTokens-1 }); again.ImagesEncoded != 0 {
		t.Errorf("the same image was encoded again (%d): its features are kept by the hash of its pixels", again.ImagesEncoded)
	}
	another := func(n int) bool { return n == 0 }
	if c.AnotherBelowImage {
		another = func(n int) bool { return n < nA }
	}
	check("another image", turn1, []vision.Image{imgB}, another)
	check("two images", []template.Message{User(Txt("Compare"), Img, Txt("with"), Img)}, []vision.Image{imgA, imgB}, func(int) bool { return true })
	check("no image", []template.Message{User(Txt("Hello"))}, nil, func(int) bool { return true })

	if c.Swap {
		// The same conversation going on with image A, then with image B in its place: B's
		// prompt restores only what precedes the image (the text turn's end), A's all of its own.
		talk := []template.Message{User(Txt("Here is a long question about pictures that I will ask you next."))}
		t1 := check("text first", talk, nil, func(int) bool { return true })
		talk = append(talk, template.Message{"role": "assistant", "content": ref.Tokenizer.Decode(t1.Tokens, true)})
		withA := append(slices.Clone(talk), User(Img, Txt("This one.")))
		a := check("then image A", withA, []vision.Image{imgA}, func(n int) bool { return n >= t1.PromptTokens-1 })
		withB := append(slices.Clone(talk), User(Img, Txt("This one.")))
		check("then image B instead", withB, []vision.Image{imgB}, func(n int) bool { return n >= t1.PromptTokens-1 && n < a.PromptTokens-1-nA })
		check("image A again", withA, []vision.Image{imgA}, func(n int) bool { return n >= a.PromptTokens-1 })
	}

	if c.Restart {
		// A restart: the blocks come back from SSD.
		e.Close()
		pc.Close()
		e, pc = open()
		res := check("the same image after a restart", turn2, []vision.Image{imgA}, func(n int) bool { return n >= first.PromptTokens-1 })
		if res.Prefix.DiskHits == 0 {
			t.Errorf("after a restart: %+v, want blocks from SSD", res.Prefix)
		}
	}

	if c.NumCtx > 0 {
		// The oldest images go with messages the template no longer renders.
		check("an older image dropped", turn1, []vision.Image{imgB, imgA}, func(n int) bool { return n >= first.PromptTokens-1 })
		// Truncation counts an image as its tokens: a conversation over num_ctx drops its
		// oldest turns (and their images) instead of failing after the images are placed.
		small := o
		small.NumCtx = c.NumCtx
		long := []template.Message{User(Img, Txt("First picture.")), {"role": "assistant", "content": "A picture."}, User(Img, Txt("Second picture."))}
		res, err := e.Generate(context.Background(), runner.Request{Messages: long, Options: small, Images: []vision.Image{imgA, imgB}}, nil)
		if err != nil || res.MessagesDropped == 0 || res.Images != 1 || res.PromptTokens > c.NumCtx {
			t.Errorf("two %d-token images in num_ctx %d: %v, %+v", nA, c.NumCtx, err, res)
		}
	}

	// A placeholder without an image, or an image without a placeholder, is an error.
	if c.Refusals >= RefuseExtraHolder {
		if _, err := e.Generate(context.Background(), runner.Request{Messages: []template.Message{User(Img, Img)}, Options: o, Images: []vision.Image{imgA}}, nil); !errors.Is(err, runner.ErrImagePlacement) {
			t.Errorf("two placeholders, one image: %v", err)
		}
	}
	if c.Refusals >= RefuseNoPlaceholder {
		if _, err := e.Generate(context.Background(), runner.Request{Messages: []template.Message{User(Txt("hi"))}, Options: o, Images: []vision.Image{imgA}}, nil); !errors.Is(err, runner.ErrImagePlacement) {
			t.Errorf("no placeholder: %v", err)
		}
	}
}

// Batched is what EngineImagesBatched runs on.
type Batched struct {
	Dir      string
	First    vision.Image // the image of the first request (the second's are fixed)
	NumBatch int          // prefill rows a step; 0 keeps the default
	// MustBatch fails the test where the engine does not batch this model on the CPU
	// backend; otherwise it skips.
	MustBatch bool
}

// EngineImagesBatched: concurrent requests with different images (and one without) in one
// continuous batch give the tokens each gives alone.
func EngineImagesBatched(t *testing.T, c Batched) {
	t.Helper()
	alone, err := runner.Load(c.Dir, runner.LoadOptions{Threads: 2, Logger: Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	batched, err := runner.Load(c.Dir, runner.LoadOptions{Threads: 2, Logger: Quiet(), Parallel: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer batched.Close()
	if _, ok := batched.BatchStats(); !ok {
		if c.MustBatch {
			t.Fatal("no continuous batching for this model on the CPU backend")
		}
		t.Skip("no continuous batching for this model on this backend")
	}
	o := runner.Greedy()
	o.NumPredict = 8
	if c.NumBatch > 0 {
		o.NumBatch = c.NumBatch
	}
	msgs := func(parts ...any) []template.Message { return []template.Message{User(parts...)} }
	img := modeltest.Image
	reqs := []runner.Request{
		{Messages: msgs(Img, Txt("What is this?")), Images: []vision.Image{c.First}, Options: o},
		{Messages: msgs(Txt("Compare"), Img, Txt("and"), Img), Images: []vision.Image{img(32, 40, 2), img(48, 48, 3)}, Options: o},
		{Messages: msgs(Txt("No picture here, just text.")), Options: o},
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

// OnBackend is what EngineImagesOn runs on.
type OnBackend struct {
	Dir        string
	NumPredict int
	NumBatch   int
	Question   string          // the text after the one image
	One        vision.Image    // the image of the first request
	Two        [2]vision.Image // the images of the second
	// Again adds a second turn that repeats One, its blocks restored from a prefix cache
	// (in RAM) on the backend under test.
	Again bool
	// Encoded: every request's images went through the tower (where no image repeats).
	Encoded bool
	// TopLogprobs, when set, asks for the log-probabilities of the tokens and of so many
	// alternatives (for Compare).
	TopLogprobs int
	// Compare checks the tokens on the backend (got) against the CPU backend's (want);
	// nil: the same greedy tokens.
	Compare func(t *testing.T, name string, got, want *runner.Result)
}

// EngineImagesOn: the engine on backend b reads one and two images (and, where Again, a
// second turn repeating the first) as on the CPU backend, in prefill chunks of NumBatch
// rows: each image counted (and, where Encoded, encoded), the tokens as Compare says.
func EngineImagesOn(t *testing.T, b compute.Backend, c OnBackend) {
	t.Helper()
	ref, err := runner.Load(c.Dir, runner.LoadOptions{Threads: 2, Logger: Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	opts := runner.LoadOptions{Backend: b, Logger: Quiet()}
	if c.Again {
		pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Log: Quiet()})
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		opts.Prefix = pc
	}
	e, err := runner.Load(c.Dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Model.Vision() == nil {
		t.Fatalf("the tower was not bound on %s", b.Name())
	}
	o := runner.Greedy()
	o.NumPredict = c.NumPredict
	o.NumBatch = c.NumBatch
	turn1 := []template.Message{User(Img, Txt(c.Question))}
	var reply string // the first request's, for the second turn
	type request struct {
		name   string
		msgs   func() []template.Message
		images []vision.Image
	}
	cases := []request{
		{"one image", func() []template.Message { return turn1 }, []vision.Image{c.One}},
		{"two images", func() []template.Message {
			return []template.Message{User(Txt("Compare"), Img, Txt("with"), Img)}
		}, c.Two[:]},
	}
	if c.Again {
		cases = append(cases, request{"the first image again", func() []template.Message {
			return append(slices.Clone(turn1), template.Message{"role": "assistant", "content": reply}, User(Txt("And the colours?")))
		}, []vision.Image{c.One}})
	}
	for _, tc := range cases {
		req := runner.Request{Messages: tc.msgs(), Options: o, Images: tc.images, Logprobs: c.TopLogprobs > 0, TopLogprobs: c.TopLogprobs}
		want, err := ref.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatalf("%s on %s: %v", tc.name, b.Name(), err)
		}
		if got.Images != len(tc.images) || c.Encoded && got.ImagesEncoded != len(tc.images) {
			t.Errorf("%s on %s: %d images (%d encoded), want %d", tc.name, b.Name(), got.Images, got.ImagesEncoded, len(tc.images))
		}
		if c.Compare != nil {
			c.Compare(t, tc.name, got, want)
		} else if !slices.Equal(got.Tokens, want.Tokens) {
			t.Errorf("%s on %s: tokens %v; on the CPU backend %v", tc.name, b.Name(), got.Tokens, want.Tokens)
		}
		if reply == "" {
			reply = ref.Tokenizer.Decode(want.Tokens, true)
		}
		cached := 0
		if got.Prefix != nil {
			cached = got.Prefix.Cached
		}
		t.Logf("%s: %d prompt tokens (%d of images, %d cached), tokens %v", tc.name, got.PromptTokens, got.ImageTokens, cached, got.Tokens)
	}
}
