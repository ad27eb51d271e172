package backend

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"

	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// The image checks: the tiny checkpoints of the architectures that read images, with
// their random vision towers (registry/randmodel: Qwen2.5-VL's windowed ViT, Qwen3.5's
// ViT and Gemma 3's SigLIP), fed a prompt holding two images. On the backend under test
// and on the CPU backend they must give the same image features (the tower's patch
// embedding, 2D RoPE or learned positions, block attention over windows or the whole
// image, RMSNorm or LayerNorm, SwiGLU or GELU, merger or pooling and projector) and the
// same logits (the language model's M-RoPE positions for Qwen, the bidirectional
// attention among an image's rows for Gemma), through a prefill in two passes that end
// between the images and decode steps after it.

// visionModelTypes are the architectures TinyVisionModels writes with a tower.
var visionModelTypes = []string{"qwen2_5_vl", "qwen3_5", "qwen3_5_moe", "gemma3"}

// TinyVisionModels writes the tiny checkpoints with a vision tower under dir, in the
// MLX layout and in each of ModelFormats (the tower stays float, as create keeps it):
// those randmodel.Generate writes with their towers for visionModelTypes (TinyOf's
// shapes); the same seed writes the same weights.
func TinyVisionModels(dir string, seed uint64) []TinyModel {
	var out []TinyModel
	for _, mt := range visionModelTypes {
		out = append(out, TinyModelsOf(filepath.Join(dir, "vision-"+mt), mt, seed, ModelFormats...)...)
	}
	return out
}

// visionImages are the check's two images, of sizes that make a different grid each
// on Qwen's processor (Gemma's resizes both to its fixed size), with pixels from seed.
func visionImages(seed uint64) []vision.Image {
	r := rand.New(rand.NewPCG(seed, 0x1a9e))
	var out []vision.Image
	for _, sz := range [][2]int{{48, 32}, {32, 40}} {
		m := vision.NewRGB(sz[0], sz[1])
		for i := range m.Pix {
			m.Pix[i] = uint8(r.IntN(256))
		}
		out = append(out, vision.NewImage(m))
	}
	return out
}

// visionRun is what one backend computed with images: the images' features, the last
// position's logits of each prefill pass and decode step, the tokens fed after the
// prompt, and the last position's logits of one prefill of the prompt and those tokens.
type visionRun struct {
	backend  string
	features []float32
	passes   [][]float32
	tokens   []int32
	whole    []float32
}

// forwardImages loads the checkpoint in dir on a backend from open, encodes the images
// and runs the prompt text, image, text, image, text in two passes (the first ending one
// token after the first image), then tinySteps decode steps: of the given tokens, or of
// its own greedy picks when tokens is nil.
func forwardImages(dir string, open Opener, images []vision.Image, tokens []int32) (r visionRun, err error) {
	b, err := open()
	if err != nil {
		return r, err
	}
	r.backend = b.Name()
	defer closeBackend(b)
	m, err := model.Load(dir, b)
	if err != nil {
		return r, err
	}
	defer m.Close()
	if m.Vision() == nil {
		return r, fmt.Errorf("%s did not load the checkpoint's vision tower (it lacks the tower's operations)", r.backend)
	}
	ctx := context.Background()
	spans, err := m.EncodeImages(ctx, images)
	if err != nil {
		return r, err
	}
	md := &model.Media{Hidden: m.Config.HiddenSize}
	var ids []int32
	text := func(ts ...int32) { ids = append(ids, ts...) }
	image := func(i int) {
		s := spans[i]
		s.Start = len(ids)
		md.Spans = append(md.Spans, s)
		ids = append(ids, model.MediaIDs(images[i].Hash, s.N())...)
		r.features = append(r.features, s.Rows...)
	}
	text(tinyPrompt[:3]...)
	image(0)
	text(tinyPrompt[3:5]...)
	cut := len(ids) - 1 // the first pass ends one text token after the first image
	image(1)
	text(tinyPrompt[5:8]...)

	// run prefills prompt in passes that end at each of cuts, then with decode runs the
	// decode steps; it returns every pass's and step's last logits.
	run := func(prompt []int32, cuts []int, decode bool) ([][]float32, error) {
		caches, err := m.NewCaches(true)
		if err != nil {
			return nil, err
		}
		model.SetMedia(caches, md)
		defer model.SetMedia(caches, nil)
		var out [][]float32
		at := 0
		for _, end := range cuts {
			l, err := m.Forward(ctx, prompt[at:end], caches, false)
			if err != nil {
				return nil, err
			}
			out, at = append(out, l), end
		}
		for i := 0; decode && i < tinySteps; i++ {
			t := greedy(out[len(out)-1])
			if tokens != nil {
				t = tokens[i]
			}
			r.tokens = append(r.tokens, t)
			l, err := m.Forward(ctx, []int32{t}, caches, false)
			if err != nil {
				return nil, err
			}
			out = append(out, l)
		}
		return out, nil
	}
	if r.passes, err = run(ids, []int{cut, len(ids)}, true); err != nil {
		return r, err
	}
	all := append(slices.Clone(ids), r.tokens...)
	whole, err := run(all, []int{len(all)}, false)
	if err != nil {
		return r, err
	}
	r.whole = whole[0]
	return r, nil
}

// CheckVisionModel runs the tiny vision model m with two images on a backend from open,
// of precision p: its decode steps must match one prefill of the same rows and, when
// ref (the CPU backend) is not nil, its image features and logits those of ref, fed the
// tokens ref picks.
func CheckVisionModel(m TinyModel, open, ref Opener, p Precision) []Result {
	tol := m.Format.Tol.For(p)
	name := m.Name() + " with images"
	if m.Uncovered != "" {
		return []Result{{Check: name, Uncovered: m.Uncovered}}
	}
	if m.Err != nil {
		return []Result{{Check: name + ": writing the checkpoint", Against: "reference", Err: m.Err}}
	}
	images := visionImages(11)
	var want visionRun
	var rerr error
	if ref != nil {
		want, rerr = forwardImages(m.Dir, ref, images, nil)
	}
	var tokens []int32
	if ref != nil && rerr == nil {
		tokens = want.tokens
	}
	got, err := forwardImages(m.Dir, open, images, tokens)
	self := Result{Check: name + ": decode steps vs one prefill", Backend: got.backend, Against: "itself", Tol: tol, Err: err}
	if err == nil {
		self.RelErr, self.Err = relErr(got.passes[len(got.passes)-1], got.whole)
	}
	out := []Result{self}
	if ref == nil {
		return out
	}
	compare := func(check string, g, w func(r visionRun) []float32) Result {
		res := Result{Check: name + ": " + check, Backend: got.backend, Against: want.backend, Tol: tol, Err: err}
		if err == nil && rerr != nil {
			res.Err = fmt.Errorf("on %s: %w", want.backend, rerr)
		}
		if res.Err == nil {
			res.RelErr, res.Err = relErr(g(got), w(want))
		}
		return res
	}
	features := func(r visionRun) []float32 { return r.features }
	out = append(out, compare("image features", features, features))
	logits := compare("logits", func(r visionRun) []float32 { return slices.Concat(r.passes...) }, func(r visionRun) []float32 { return slices.Concat(r.passes...) })
	if logits.Err == nil {
		agree, gerr := sameGreedy(got.passes, want.passes, tol)
		logits.Note = fmt.Sprintf("greedy tokens: %d of %d as the reference's", agree, len(want.passes))
		logits.Err = gerr
	}
	return append(out, logits)
}
