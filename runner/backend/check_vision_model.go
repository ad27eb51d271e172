package backend

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// The image checks: the tiny checkpoints of the architectures that read images, with
// their random vision towers (registry/randmodel: Qwen2.5-VL's windowed ViT, Qwen3.5's
// ViT, Gemma 3's SigLIP and Gemma 4's ViT), fed a prompt holding two images. On the
// backend under test and on the CPU backend they must give the same image features (the
// tower's patch embedding, 2D RoPE or learned positions, block attention over windows or
// the whole image, RMSNorm or LayerNorm, SwiGLU or GELU, clipped linears, merger or
// pooling and projector) and the same logits (the language model's M-RoPE positions for
// Qwen, the bidirectional attention among an image's rows for Gemma, on Gemma 4's
// KV-shared layers too), through a prefill in two passes that end between the images and
// decode steps after it.

// visionModel is one checkpoint of the image checks: an architecture that reads images
// and how its checkpoint is written in Hugging Face's layout.
type visionModel struct {
	modelType string
	variant   string // TinyModel.Variant
	// write writes the checkpoint with its tower into dir; nil for randmodel.Generate of
	// TinyOf's shapes, which writes the type's tower.
	write func(dir string, seed uint64) error
}

// visionModels are the checkpoints TinyVisionModels writes: TinyOf's of the Qwen types
// and Gemma 3; for Gemma 4 (whose TinyOf is the MoE kind, without KV-shared layers) the
// E2B kind, whose KV-shared layers apply the bidirectional image mask over their source
// layers' caches, and the same with clipped linears, whose bounds the tiny tower's
// activations cross (so a backend that does not clamp gives other features).
//
// Gemma 4's features and logits differ between two correct float32 backends about ten
// times more than the other models' do: its attention, in the tower and the language
// model, has a scale of 1 over RMS-normed queries and keys, so q·k reaches 20 to 40 and
// the exact softmax turns a rounding difference in its inputs into 3 to 6 times as much
// (runner/gemma4's TestScaleOneAttention), layer after layer; each backend lies about as far
// from a float64 reference as from the other: neither is wrong.
var visionModels = []visionModel{
	{modelType: "qwen2_5_vl"}, {modelType: "qwen3_5"}, {modelType: "qwen3_5_moe"}, {modelType: "gemma3"},
	{modelType: "gemma4", variant: "kv-shared", write: gemma4Vision(false)},
	{modelType: "gemma4", variant: "kv-shared clipped", write: gemma4Vision(true)},
}

// gemma4Vision writes randmodel.TinyGemma4Multimodal with TinyGemma4Vision's tower (its
// image mask bidirectional), with clipped linears or without.
func gemma4Vision(clipped bool) func(dir string, seed uint64) error {
	return func(dir string, seed uint64) error {
		if err := randmodel.Generate(dir, randmodel.TinyGemma4Multimodal(tinyVocab), randmodel.Options{Seed: seed}); err != nil {
			return err
		}
		v := randmodel.TinyGemma4Vision()
		v.Clipped = clipped
		return randmodel.AddGemma4Vision(dir, v, seed, true)
	}
}

// TinyVisionModels writes the tiny checkpoints with a vision tower (visionModels) under
// dir, in the MLX layout and in each of ModelFormats (the tower stays float, as create
// keeps it); the same seed writes the same weights.
func TinyVisionModels(dir string, seed uint64) []TinyModel {
	var out []TinyModel
	for _, v := range visionModels {
		sub := filepath.Join(dir, "vision-"+v.modelType)
		if v.variant != "" {
			sub += "-" + strings.ReplaceAll(v.variant, " ", "-")
		}
		if v.write == nil {
			out = append(out, TinyModelsOf(sub, v.modelType, seed, ModelFormats...)...)
			continue
		}
		write := func(hf string) error { return v.write(hf, seed) }
		out = append(out, convertTiny(TinyModel{ModelType: v.modelType, Variant: v.variant}, sub, write, ModelFormats)...)
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
// prompt, and every position's logits of one prefill of the prompt and those tokens
// (the image rows' too: on Gemma 4's KV-shared layers, the last ones, the image mask
// changes those rows' logits only).
type visionRun struct {
	backend  string
	features []float32
	passes   [][]float32
	tokens   []int32
	whole    []float32
}

// last is the last position's logits of the one prefill.
func (r visionRun) last() []float32 { return r.whole[len(r.whole)-len(r.passes[0]):] }

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
	// decode steps; it returns every pass's and step's last logits, or with all (and
	// one pass) every position's.
	run := func(prompt []int32, cuts []int, decode, all bool) ([][]float32, error) {
		caches, err := m.NewCaches(true)
		if err != nil {
			return nil, err
		}
		model.SetMedia(caches, md)
		defer model.SetMedia(caches, nil)
		var out [][]float32
		at := 0
		for _, end := range cuts {
			l, err := m.Forward(ctx, prompt[at:end], caches, all)
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
	if r.passes, err = run(ids, []int{cut, len(ids)}, true, false); err != nil {
		return r, err
	}
	all := append(slices.Clone(ids), r.tokens...)
	whole, err := run(all, []int{len(all)}, false, true)
	if err != nil {
		return r, err
	}
	r.whole = whole[0]
	return r, nil
}

// CheckVisionModel runs the tiny vision model m with two images on a backend from open,
// of precision p: its decode steps must match one prefill of the same rows and, when
// ref (the CPU backend) is not nil, its image features and logits (each pass's and
// step's last, and every position's of the one prefill) those of ref, fed the tokens ref
// picks.
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
		self.RelErr, self.Err = relErr(got.passes[len(got.passes)-1], got.last())
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
	all := func(r visionRun) []float32 { return slices.Concat(slices.Concat(r.passes...), r.whole) }
	logits := compare("logits", all, all)
	if logits.Err == nil {
		agree, gerr := sameGreedy(got.passes, want.passes, tol)
		logits.Note = fmt.Sprintf("greedy tokens: %d of %d as the reference's", agree, len(want.passes))
		logits.Err = gerr
	}
	return append(out, logits)
}
