package backend

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/residency"
)

// The whole-model checks: a tiny random checkpoint of every architecture registered
// with runner/model (registry/randmodel writes it, registry/create converts it to the
// MLX layout, as float32 and as 4-bit), run on the backend under test and on the CPU
// backend. An architecture registered later is picked up as it registers; one that
// randmodel cannot write yet is reported as not covered.

// tinyVocab is the tiny models' vocabulary; the prompt is longer than Gemma's tiny
// sliding window (8), so that its rotating cache wraps.
const tinyVocab = 256

var (
	tinyPrompt = []int32{1, 17, 42, 99, 200, 3, 255, 8, 77, 5, 130, 64}
	tinySteps  = 4 // decode steps after the prompt
)

// ModelFormat is one form the tiny checkpoints are converted to, with the tolerance
// of their logits.
type ModelFormat struct {
	Name string
	opts create.Options
	Tol  Tol
}

// ModelFormats are the forms every architecture is checked in: float32, and 4-bit
// with float32 scales, both over float32 KV caches. Their products and attention run
// in float32 on every backend (MLX casts a product's input to the type of the weight
// or its scales, and attends in fp16 over an fp16 cache), so that the logits of a
// reduced-precision backend stay close to the reference's: an input rounded to 16 or 8
// bits moves a router's logits enough to pick another expert now and then, which
// changes a mixture-of-experts model's output by far more than the rounding. The fp16
// and bf16 arithmetic is the op table's to check; here what remains between backends
// is the order of sums, and what is checked is how each architecture composes the
// operations.
var ModelFormats = []ModelFormat{
	{"float32", create.Options{}, Tol{1e-3, 1e-2}},
	{"4-bit", create.Options{Bits: 4, GroupSize: 64}, Tol{1e-3, 1e-2}},
}

// ArchFormats are the further forms of the architectures whose checkpoints ship
// another format beside those: gpt-oss as mlx-community ships it ("MXFP4-Q8": the
// stacked experts in mxfp4, the other weights 8-bit), whose expert products run on
// mxfp4 codes. mxfp4's scales are powers of two and the activations stay float32
// (compute.Quant's float modes), so the tolerance is the other formats'.
var ArchFormats = map[string][]ModelFormat{
	"gpt_oss": {{"mxfp4-q8", create.Options{Bits: 8, GroupSize: 64, Experts: quant.MXFP4}, Tol{1e-3, 1e-2}}},
}

// TinyModel is the tiny checkpoint of one registered architecture in one format.
type TinyModel struct {
	ModelType string // config.json's model_type, as registered
	// Variant names a checkpoint of the architecture other than TinyOf's, of other
	// shapes or options (the image checks' Gemma 4 with KV-shared layers, its linears
	// clipped or not); empty for TinyOf's.
	Variant string
	Format  ModelFormat // zero when Uncovered
	Dir     string
	// Uncovered says why there is no checkpoint: randmodel cannot write this
	// architecture yet.
	Uncovered string
	Err       error // writing or converting it failed
}

// Name is how the report names the model's checks.
func (m TinyModel) Name() string {
	n := "tiny " + m.ModelType
	for _, s := range []string{m.Variant, m.Format.Name} {
		if s != "" {
			n += " " + s
		}
	}
	return n
}

// TinyModels writes the tiny checkpoints of every registered architecture
// (model.Supported) under dir, in every format (ModelFormats, and the architecture's
// ArchFormats); the same seed writes the same weights. An architecture randmodel
// cannot write gets one TinyModel saying so (Uncovered).
func TinyModels(dir string, seed uint64) []TinyModel {
	var out []TinyModel
	for _, mt := range model.Supported() {
		formats := slices.Concat(ModelFormats, ArchFormats[mt])
		out = append(out, TinyModelsOf(filepath.Join(dir, mt), mt, seed, formats...)...)
	}
	return out
}

// TinyModelsOf writes the tiny checkpoint of the architecture registered as
// modelType under dir, in the formats given (ModelFormats' entries): one TinyModel per
// format, or a single one that is Uncovered.
func TinyModelsOf(dir, modelType string, seed uint64, formats ...ModelFormat) []TinyModel {
	cfg, err := randmodel.TinyOf(modelType, tinyVocab)
	if err != nil {
		return []TinyModel{{ModelType: modelType, Uncovered: err.Error()}}
	}
	return convertTiny(TinyModel{ModelType: modelType}, dir, func(hf string) error {
		return randmodel.Generate(hf, cfg, randmodel.Options{Seed: seed})
	}, formats)
}

// convertTiny has write put a checkpoint in Hugging Face's layout in a folder under dir
// and converts it into each of formats, one TinyModel (m in that format) per format.
func convertTiny(m TinyModel, dir string, write func(hf string) error, formats []ModelFormat) []TinyModel {
	hf := filepath.Join(dir, "hf")
	defer os.RemoveAll(hf)
	err := write(hf)
	var out []TinyModel
	for _, f := range formats {
		m := m
		m.Format, m.Dir, m.Err = f, filepath.Join(dir, f.Name), err
		if err == nil {
			_, m.Err = create.Convert(context.Background(), hf, m.Dir, f.opts)
		}
		out = append(out, m)
	}
	return out
}

// Uncovered lists the registered architectures TinyModels writes no checkpoint for,
// with the reason.
func Uncovered() map[string]string {
	out := map[string]string{}
	for _, mt := range model.Supported() {
		if _, err := randmodel.TinyOf(mt, tinyVocab); err != nil {
			out[mt] = err.Error()
		}
	}
	return out
}

// modelRun is what one backend computed for a tiny model: the last position's logits of
// the prompt's prefill and of each decode step, the tokens fed after the prompt, and
// the last position's logits of one prefill of the prompt and those tokens.
type modelRun struct {
	backend string
	passes  [][]float32
	tokens  []int32
	whole   []float32
}

// greedy is the index of the largest logit (the lowest of equals).
func greedy(logits []float32) int32 {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return int32(best)
}

// forward loads m on a backend from open and runs the prompt, then tinySteps decode
// steps: of the given tokens, or when tokens is nil of its own greedy picks. With
// res, the model streams its weights through it under a budget of its pinned weights
// and one unit; streamed is the manager's counters at the end, nil when the backend
// streamed nothing.
func forward(dir string, open Opener, tokens []int32, res *residency.Manager) (r modelRun, streamed *residency.Stats, err error) {
	b, err := open()
	if err != nil {
		return r, nil, err
	}
	r.backend = b.Name()
	var m *model.Model
	if res != nil {
		m, err = model.LoadWith(dir, b, model.LoadConfig{Residency: res})
	} else {
		m, err = model.Load(dir, b)
	}
	if err != nil {
		closeBackend(b)
		return r, nil, err
	}
	res = m.Residency()
	defer func() {
		if res != nil {
			s := res.Stats()
			streamed = &s
		}
		closeBackend(b)
		m.Close()
	}()
	if res != nil {
		s := res.Stats()
		res.SetBudget(s.Pinned + s.Total/int64(s.Units))
	}
	ctx := context.Background()
	caches, err := m.NewCaches(true)
	if err != nil {
		return r, streamed, err
	}
	next := tinyPrompt
	for i := 0; i <= tinySteps; i++ {
		l, err := m.Forward(ctx, next, caches, false)
		if err != nil {
			return r, streamed, err
		}
		r.passes = append(r.passes, l)
		if i == tinySteps {
			break
		}
		t := greedy(l)
		if tokens != nil {
			t = tokens[i]
		}
		r.tokens = append(r.tokens, t)
		next = []int32{t}
	}
	fresh, err := m.NewCaches(true)
	if err != nil {
		return r, streamed, err
	}
	r.whole, err = m.Forward(ctx, append(slices.Clone(tinyPrompt), r.tokens...), fresh, false)
	return r, streamed, err
}

// CheckModel runs the tiny model m on a backend from open, of precision p: its
// decoding one token at a time must match one prefill of the same tokens and, when ref
// (the CPU backend) is not nil, its logits and greedy tokens those of ref, fed the
// tokens ref picks.
func CheckModel(m TinyModel, open, ref Opener, p Precision) []Result {
	tol := m.Format.Tol.For(p)
	switch {
	case m.Uncovered != "":
		return []Result{{Check: m.Name(), Uncovered: m.Uncovered}}
	case m.Err != nil:
		return []Result{{Check: m.Name() + ": writing the checkpoint", Against: "reference", Err: m.Err}}
	}
	var want modelRun
	var rerr error
	if ref != nil {
		want, _, rerr = forward(m.Dir, ref, nil, nil)
	}
	got, _, err := forward(m.Dir, open, want.tokens, nil)
	self := Result{Check: m.Name() + ": decode steps vs one prefill", Backend: got.backend, Against: "itself", Tol: tol, Err: err}
	if err == nil {
		self.RelErr, self.Err = relErr(got.passes[len(got.passes)-1], got.whole)
	}
	out := []Result{self}
	if ref == nil {
		return out
	}
	cmp := Result{Check: m.Name() + ": logits", Backend: got.backend, Against: want.backend, Tol: tol, Err: err}
	if err == nil && rerr != nil {
		cmp.Err = fmt.Errorf("on %s: %w", want.backend, rerr)
	}
	if cmp.Err == nil {
		cmp.RelErr, cmp.Err = relErr(slices.Concat(got.passes...), slices.Concat(want.passes...))
		agree, gerr := sameGreedy(got.passes, want.passes, tol)
		cmp.Note = fmt.Sprintf("greedy tokens: %d of %d as the reference's", agree, len(want.passes))
		if cmp.Err == nil {
			cmp.Err = gerr
		}
	}
	return append(out, cmp)
}

// sameGreedy counts the passes whose greedy token is the reference's, and fails at the
// first that differs where the reference's logits tell them apart by more than the
// tolerance allows (a near-tie may go either way within it).
func sameGreedy(got, want [][]float32, tol float64) (int, error) {
	agree := 0
	for i := range want {
		g, w := greedy(got[i]), greedy(want[i])
		if g == w {
			agree++
			continue
		}
		var scale float64
		for _, v := range want[i] {
			scale = max(scale, math.Abs(float64(v)))
		}
		if gap := float64(want[i][w] - want[i][g]); gap > 2*tol*scale {
			return agree, fmt.Errorf("greedy token %d of %d is %d, the reference's %d by a margin of %.3g", i+1, len(want), g, w, gap/scale)
		}
	}
	return agree, nil
}

// CheckStreaming runs the tiny model m on a backend from open twice, mapped and with
// its weights streamed through a residency manager under a budget of one unit beyond
// the pinned weights (experts of a mixture-of-experts model, else decoder layers,
// where the backend streams them): the logits must be the same.
func CheckStreaming(m TinyModel, open Opener, p Precision) Result {
	res := Result{Check: m.Name() + ": streamed vs mapped", Against: "itself", Tol: Tol{1e-6, 1e-4}.For(p)}
	switch {
	case m.Uncovered != "":
		res.Uncovered = m.Uncovered
		return res
	case m.Err != nil:
		res.Err = m.Err
		return res
	}
	mapped, _, err := forward(m.Dir, open, nil, nil)
	res.Backend = mapped.backend
	if err != nil {
		res.Err = err
		return res
	}
	got, streamed, err := forward(m.Dir, open, mapped.tokens, residency.New(residency.Options{Budget: 1 << 40}))
	switch {
	case err != nil:
		res.Err = err
	case streamed == nil:
		res.Uncovered = "this backend maps every weight of this model (it streams none)"
	default:
		res.RelErr, res.Err = relErr(slices.Concat(got.passes...), slices.Concat(mapped.passes...))
		res.Note = fmt.Sprintf("%d units, %d reads, %d evictions, %d guessed ahead", streamed.Units, streamed.Reads, streamed.Evictions, streamed.Predicted)
		res.Stream = streamed
	}
	return res
}

// streamOps are the methods the streaming checks exercise: the loader's sources, the
// backend's binding of units, and the guesses of the next experts.
var streamOps = []string{"StreamFinisher.FinishStream", "ExpertGuesser.WantsExpertGuess", "ExpertGuesser.GuessExperts"}

func closeBackend(b compute.Backend) {
	if c, ok := b.(interface{ Close() error }); ok {
		c.Close()
	}
}
