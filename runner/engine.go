package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	_ "github.com/mlxg/mlxg/runner/model/all" // every architecture
	"github.com/mlxg/mlxg/runner/pipeline"
	"github.com/mlxg/mlxg/runner/residency"
	"github.com/mlxg/mlxg/runner/sample"
	"github.com/mlxg/mlxg/text/template"
	"github.com/mlxg/mlxg/text/tokenizer"
	"github.com/mlxg/mlxg/vision"
)

// LoadOptions say how to load a model.
type LoadOptions struct {
	// Backend runs the model; nil means the CPU backend with Threads goroutines
	// (0: one per CPU).
	Backend compute.Backend
	Threads int
	// KVCache makes a sequence's per-layer caches for a context of numCtx tokens; nil
	// means full-attention fp16 caches (model.NewCaches). The KV policy plugs in here.
	KVCache func(m *model.Model, numCtx int) ([]kvstore.Layer, error)
	// Context is the most tokens a sequence holds, settled by the caller where it plans the
	// load (the KV policy's Plan.Context, which is already within the model's maximum); 0:
	// the model's max_position_embeddings. A request's num_ctx above it is lowered to it.
	Context int
	// Logger receives load and truncation messages; nil means slog.Default().
	Logger *slog.Logger
	// Prefix shares prompt prefixes between requests (prefix.go); nil: none.
	Prefix *kvstore.PrefixCache
	// Parallel above 1 runs up to that many concurrent requests as one continuous batch
	// (batch.go): one forward pass per step for all of them. Others wait for a slot.
	Parallel int
	// Pipeline, when set, loads the model split over the leader's machines: this
	// process runs rank 0's layers and the generation loop. Nil: the whole model here.
	Pipeline *pipeline.Leader
	// WeightBudget, when positive, streams the model's mixture-of-experts weights (or a
	// dense model's decoder layers) through a residency manager (runner/residency)
	// holding at most this many bytes of weights in memory, the other weights counted
	// first; the rest is read from the checkpoint's files as the router picks it (or as
	// the pass reaches it). StreamPolicy is the expert cache's eviction policy.
	// Ignored with Pipeline.
	WeightBudget int64
	StreamPolicy residency.Policy
	// MaxBatch, when positive, is the most prompt tokens a pass takes, below a request's
	// num_batch: a pass's activations grow with its rows (the CPU backend keeps every
	// intermediate tensor until the pass ends), and a model in streaming mode gives its
	// weights the memory they would take.
	MaxBatch int
	// DecodeLoan, when positive with WeightBudget, is memory planned for the activations
	// of passes of up to MaxBatch rows that the expert cache may use while every pass has
	// at most DecodeRows rows (model.SetDecodeLoan).
	DecodeLoan int64
	DecodeRows int
	// ImagePixels, when positive, lowers the pixel budget of the model's image processor to
	// at most that many pixels an image (never below its own minimum): the memory plan's
	// choice when encoding the largest image the checkpoint allows does not fit
	// (model.VisionMemory). Images are then resized smaller than transformers would.
	ImagePixels int
}

// FP32Cache is a KVCache that keeps keys and values in float32 (reference tests).
func FP32Cache(m *model.Model, _ int) ([]kvstore.Layer, error) { return m.NewCaches(true) }

// Engine is a loaded model with its tokenizer and chat template, ready to generate.
// Requests may run concurrently: each has its own caches and sampler.
type Engine struct {
	Dir       string
	Model     *model.Model
	Tokenizer *tokenizer.Tokenizer   // nil for a model loaded with LoadModel
	Template  *template.ChatTemplate // nil when the checkpoint has no chat template
	eos       []int32
	kv        func(m *model.Model, numCtx int) ([]kvstore.Layer, error)
	maxCtx    int // LoadOptions.Context, else max_position_embeddings; 0: no limit
	maxBatch  int // LoadOptions.MaxBatch; 0: no limit
	log       *slog.Logger
	prefix    *prefixEngine
	format    *formatVocab  // constrained decoding's vocabulary (format.go), set by Load
	batch     *batcher      // continuous batching (batch.go); nil: each request runs its own passes
	coal      *coalescer    // prompts being prefilled (coalesce.go); nil: no waiting for them
	draft     *Engine       // the draft model (draft.go); nil: prompt lookup
	kvHeld    *atomic.Int64 // the KV bytes its running sequences hold (KVHeld); nil: not counted
	features  *featureCache // encoded images by their pixels' hash (images.go); nil: none kept
}

// KVHeld is the bytes the KV caches of the engine's running sequences hold, as of their latest
// prefill or 64 generated tokens (blocks a sequence shares with the prefix cache count here too).
func (e *Engine) KVHeld() int64 {
	if e.kvHeld == nil {
		return 0
	}
	return e.kvHeld.Load()
}

// kvMeter counts one sequence's KV bytes into its engine's KVHeld.
type kvMeter struct {
	e *Engine
	n int64
}

func (m *kvMeter) update(caches []kvstore.Layer) {
	if m.e.kvHeld == nil {
		return
	}
	var b int64
	for _, c := range caches {
		if c != nil {
			b += c.Bytes()
		}
	}
	m.e.kvHeld.Add(b - m.n)
	m.n = b
}

func (m *kvMeter) done() {
	if m.e.kvHeld == nil {
		return
	}
	m.e.kvHeld.Add(-m.n)
	m.n = 0
}

// Load loads the checkpoint in dir: weights, tokenizer and (when present) chat template.
func Load(dir string, o LoadOptions) (*Engine, error) {
	e, err := LoadModel(dir, o)
	if err != nil {
		return nil, err
	}
	if e.Tokenizer, err = tokenizer.Load(dir); err != nil {
		e.Close()
		return nil, fmt.Errorf("loading the tokenizer of %s: %w", dir, err)
	}
	if hasChatTemplate(dir) {
		if e.Template, err = template.LoadChatTemplate(dir); err != nil {
			e.Close()
			return nil, fmt.Errorf("loading the chat template of %s: %w", dir, err)
		}
	}
	e.eos = mergeIDs(e.eos, e.Tokenizer.EOS())
	e.format = &formatVocab{}
	return e, nil
}

// hasChatTemplate reports whether dir ships a chat template (chat_template.jinja, or
// a non-null chat_template in tokenizer_config.json); a base model has none.
func hasChatTemplate(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, "chat_template.jinja")); err == nil {
		return true
	}
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return false
	}
	var cfg map[string]json.RawMessage
	if json.Unmarshal(raw, &cfg) != nil {
		return true // let LoadChatTemplate report the broken file
	}
	t, ok := cfg["chat_template"]
	return ok && string(t) != "null"
}

// LoadModel loads only the weights: the engine generates token ids (GenerateTokens)
// but not text. Tests and benchmarks on tokenizer-less checkpoints use it.
func LoadModel(dir string, o LoadOptions) (*Engine, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	backend := o.Backend
	if backend == nil {
		backend = cpu.New(o.Threads)
	}
	tuneGC()
	start := time.Now()
	copies, _ := backend.(interface{ CopiedWeightBytes() int64 })
	var copiedBefore int64
	if copies != nil {
		copiedBefore = copies.CopiedWeightBytes()
	}
	var m *model.Model
	var err error
	switch {
	case o.Pipeline != nil:
		m, err = o.Pipeline.Load(dir, backend)
	case o.WeightBudget > 0:
		res := residency.New(residency.Options{Budget: o.WeightBudget, Policy: o.StreamPolicy})
		if m, err = model.LoadWith(dir, backend, model.LoadConfig{Residency: res}); err != nil {
			res.Close()
		} else if m.Residency() == nil {
			log.Warn("weight streaming asked for, but this model has no weights the backend streams: all are mapped",
				"dir", dir, "backend", backend.Name())
		} else {
			m.SetDecodeLoan(o.DecodeLoan, o.DecodeRows)
			st := res.Stats()
			if res.Dense() {
				kept, layers := res.KeptLayers()
				log.Info("streaming layers", "dir", dir, "budget", o.WeightBudget, "pinned", st.Pinned, "streamed", st.Streamed,
					"layers", layers, "kept", kept)
			} else {
				log.Info("streaming experts", "dir", dir, "budget", o.WeightBudget, "pinned", st.Pinned, "streamed", st.Streamed,
					"units", st.Units, "policy", o.StreamPolicy, "decode_loan", o.DecodeLoan)
			}
		}
	default:
		m, err = model.Load(dir, backend)
	}
	if err != nil {
		return nil, err
	}
	if copies != nil {
		if n := copies.CopiedWeightBytes() - copiedBefore; n > 0 {
			// Worth saying: it costs those weights' size in RAM again, and a rewrite cures it.
			// The CPU backend copies them only where it cannot read misaligned weights in
			// place (cpu.ReadsMisaligned: not amd64 or arm64); MLX copies them on Metal.
			log.Warn("the checkpoint stores some weights at offsets not aligned for their type: the backend holds a copy of them beside the mapping (`mlxg create` writes none)",
				"dir", dir, "copied", n)
		}
	}
	if v := m.Vision(); v != nil && o.ImagePixels > 0 {
		if p := v.Processor(); p.Kind == "qwen" && o.ImagePixels < p.MaxPixels {
			// The processor is the model's own: preprocessing, token counts and the passes'
			// patch budget all read it.
			p.MaxPixels = max(o.ImagePixels, p.MinPixels)
			log.Warn("the image pixel budget is lowered to fit memory", "dir", dir, "max_pixels", p.MaxPixels)
		}
	}
	kv := o.KVCache
	if kv == nil {
		kv = func(m *model.Model, _ int) ([]kvstore.Layer, error) { return m.NewCaches(false) }
	}
	log.Info("model loaded", "dir", dir, "type", m.Config.ModelType, "layers", m.Config.NumLayers,
		"backend", backend.Name(), "weights", m.WeightBytes(), "took", time.Since(start).Round(time.Millisecond))
	e := &Engine{Dir: dir, Model: m, eos: m.Config.EOS, kv: kv, log: log, prefix: newPrefixEngine(o.Prefix, dir, log), kvHeld: new(atomic.Int64), features: &featureCache{}}
	e.maxBatch = o.MaxBatch
	if e.maxCtx = o.Context; e.maxCtx <= 0 {
		e.maxCtx = m.Config.MaxPositions
	}
	if o.Parallel > 1 {
		if m.Batched() {
			e.batch = newBatcher(m, o.Parallel)
			e.coal = &coalescer{}
		} else {
			log.Info("concurrent requests run side by side: no batched passes for this model on this backend", "type", m.Config.ModelType, "backend", backend.Name())
		}
	}
	return e, nil
}

// BatchStats describes the engine's continuous batch; false when it does not batch.
func (e *Engine) BatchStats() (BatchStats, bool) {
	if e.batch == nil {
		return BatchStats{}, false
	}
	return e.batch.Stats(), true
}

// forward runs tokens through caches: in the engine's batch when it has one. done is
// the previous decode step's logits, which the caller no longer reads (nil: none, as after
// a prefill, whose logits the prefix cache may keep): they go back to the backend's pool
// alone, and take the new logits in a batch (model.Sequence.Out), so that decoding does
// not allocate a vocabulary-sized slice per token.
func (e *Engine) forward(ctx context.Context, tokens []int32, caches []kvstore.Layer, done []float32) ([]float32, error) {
	if e.batch != nil {
		return e.batch.forward(ctx, model.Sequence{Tokens: tokens, Caches: caches, Out: done})
	}
	logits, err := e.Model.Forward(ctx, tokens, caches, false)
	if err == nil && done != nil {
		e.Model.Recycle(done)
	}
	return logits, err
}

// Close releases the model.
func (e *Engine) Close() error { return e.Model.Close() }

// gcPercent is the Go collector's GOGC once a model is loaded, unless the user set GOGC.
// A loaded model's live heap is mostly pointer-free activation buffers and KV blocks, cheap
// to collect, while Go's default (100) lets dead memory (each decode step's logits: 600 KiB
// at Qwen's 151,936 tokens, recycled since) grow to the size of the live heap before a collection: on the
// Qwen2-0.5B shape the server's heap went from 140 MiB live to 276 MiB between
// collections. At 25 the dead part stays under a quarter of the live heap, for a few more
// collections of about 20 ms of one core each (scripts/bench --peer none --bits 8: peak RSS
// 837 -> 735 MiB).
const gcPercent = 25

var gcOnce sync.Once

func tuneGC() {
	gcOnce.Do(func() {
		if os.Getenv("GOGC") == "" {
			debug.SetGCPercent(gcPercent)
		}
	})
}

// EOS returns the end-of-sequence ids: config.json and generation_config.json's
// eos_token_id and the tokenizer's eos_token.
func (e *Engine) EOS() []int32 { return slices.Clone(e.eos) }

// Request is one generation: a chat (Messages, rendered with the model's chat
// template) or a raw prompt used as it is.
type Request struct {
	Messages []template.Message
	Tools    []any
	// TemplateKwargs are extra chat-template variables, e.g. {"enable_thinking": false}.
	TemplateKwargs map[string]any
	// Prompt is used verbatim (the tokenizer adds BOS as its post-processor says)
	// when Messages is empty.
	Prompt  string
	Options Options
	// NoTruncate makes a prompt that does not fit num_ctx an error (*ContextError)
	// instead of dropping old messages and tokens (Ollama's "truncate": false).
	NoTruncate bool
	// NoShift ends generation with "length" when the window is full instead of
	// shifting the context (Ollama's "shift": false).
	NoShift bool
	// Format constrains the answer to JSON (structured outputs, format.go); nil: free text.
	Format *Format
	// EndTokens end generation as the end-of-sequence tokens do, never passed on: a chat
	// template's turn markers (a model that opens another turn has ended its own). A text
	// that is not one token of the vocabulary is ignored.
	EndTokens []string
	// SpecialTokens passes the text of special tokens on with the rest (they are dropped
	// otherwise): the markers of OpenAI's harmony format are special tokens, and its
	// parser reads them (text/parser).
	SpecialTokens bool
	// Logprobs asks for each generated token's log-probability (Result.Logprobs), with
	// the TopLogprobs (0 to sample.MaxTopLogprobs) most likely tokens at its position.
	// OnLogprobs, when set, receives them while streaming: just before fn is given text,
	// the entries of the tokens that text completes. A token whose text is never passed
	// on (part of a stop string) has none.
	Logprobs    bool
	TopLogprobs int
	OnLogprobs  func([]Logprob)
	// Context are tokens placed before the prompt: the Context of an earlier Result (the
	// conversation so far), as Ollama's /api/generate "context". With it, the prompt is
	// tokenized without the tokenizer's added BOS.
	Context []int32
	// WantContext fills Result.Context.
	WantContext bool
	// Images are the images the prompt's image placeholders stand for, in order; the last
	// ones when the prompt has fewer placeholders (truncation dropped the messages of the
	// others). A model without a vision tower refuses them (ErrTextOnly).
	Images []vision.Image
	// OnPrompt, when set, is told how the prompt fits the context once that is settled and before
	// any of it is computed (nothing is cut with NoTruncate: a prompt that does not fit is a
	// *ContextError instead), so that a server can say so in its response's headers.
	OnPrompt func(PromptFit)
}

// PromptFit is how a prompt fits the context: the tokens evaluated, the context, and what was
// cut to fit (prompt tokens dropped, and chat messages dropped before them).
type PromptFit struct {
	Tokens, NumCtx, Truncated, MessagesDropped int
}

// Logprob is a generated token's log-probability and its position's most likely tokens.
type Logprob = sample.Logprob

// ContextError reports a prompt that does not fit the context window.
type ContextError struct {
	PromptTokens, NumCtx int
}

func (e *ContextError) Error() string {
	return fmt.Sprintf("the prompt has %d tokens, more than the context window (num_ctx %d) holds: raise num_ctx or shorten the prompt", e.PromptTokens, e.NumCtx)
}

// Result describes a finished generation.
type Result struct {
	Text            string  // everything passed to the callback
	Tokens          []int32 // generated ids, EOS excluded
	DoneReason      string  // "stop" (EOS or a stop string) or "length" (num_predict or num_ctx)
	StopSequence    string  // the stop string that ended generation ("" when none did)
	PromptTokens    int     // prompt tokens evaluated
	PromptTruncated int     // prompt tokens dropped to fit num_ctx
	MessagesDropped int     // chat messages dropped to fit num_ctx
	// Images and ImageTokens: the prompt's images and the rows they fill (part of PromptTokens);
	// ImagesEncoded of them went through the tower (the others' features were kept), in
	// EncodeDuration (part of PromptDuration).
	Images, ImageTokens, ImagesEncoded int
	EncodeDuration                     time.Duration
	PromptDuration                     time.Duration
	EvalCount                          int // tokens generated
	EvalDuration                       time.Duration
	TotalDuration                      time.Duration
	Prefix                             *kvstore.RequestStats // what the prefix cache gave; nil without one
	KVBytes                            int64                 // what the sequence's caches held at the end
	Logprobs                           []Logprob             // with Request.Logprobs: one per token whose text was passed on
	// Context (with Request.WantContext) is the conversation as tokens: the prompt (with the
	// request's Context) and Text, for the next request's Context.
	Context []int32
	// Speculative decoding (spec.go): tokens drafted, drafted tokens kept, and the
	// verification passes that checked them.
	DraftTokens, DraftAccepted, DraftPasses int
}

// PromptRate is prefill speed in tokens per second.
func (r *Result) PromptRate() float64 { return rate(r.PromptTokens, r.PromptDuration) }

// EvalRate is decode speed in tokens per second.
func (r *Result) EvalRate() float64 { return rate(r.EvalCount, r.EvalDuration) }

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Generate runs a request, calling fn with text as it becomes final: text that may
// still turn into a stop string is held back, and a stop string is never passed on.
// If fn returns an error, generation stops with it. On cancellation it returns the
// partial result and ctx.Err().
func (e *Engine) Generate(ctx context.Context, req Request, fn func(text string) error) (*Result, error) {
	if e.Tokenizer == nil {
		return nil, errors.New("generate: the model was loaded without its tokenizer")
	}
	o := req.Options
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if req.Logprobs && (req.TopLogprobs < 0 || req.TopLogprobs > sample.MaxTopLogprobs) {
		return nil, fmt.Errorf("top_logprobs is %d: it must be between 0 and %d", req.TopLogprobs, sample.MaxTopLogprobs)
	}
	vocab := max(e.Model.Config.VocabSize, e.Tokenizer.VocabSize())
	for i, id := range req.Context {
		if id < 0 || int(id) >= vocab {
			return nil, fmt.Errorf("context[%d] is %d, not a token of this model (vocabulary of %d): send back the context a response of this model returned", i, id, vocab)
		}
	}
	numCtx := e.numCtx(o)
	var prompt []int32
	dropped := 0
	if len(req.Messages) > 0 {
		var err error
		if prompt, dropped, err = e.chatPrompt(req, numCtx, !req.NoTruncate); err != nil {
			return nil, err
		}
	} else {
		text := req.Prompt
		if len(req.Images) > 0 {
			text = e.frameImages(text)
		}
		prompt = e.Tokenizer.Encode(text, len(req.Context) == 0)
	}
	if len(req.Context) > 0 {
		prompt = append(slices.Clone(req.Context), prompt...)
	}
	if len(prompt) == 0 {
		return nil, errors.New("generate: the prompt is empty")
	}
	var media *model.Media
	var enc imageStats
	if len(req.Images) > 0 {
		var err error
		if prompt, media, enc, err = e.withImages(ctx, prompt, req.Images); err != nil {
			return nil, err
		}
	}

	dec := e.Tokenizer.NewStreamDecoder(!req.SpecialTokens)
	stops := &stopFilter{stops: o.Stop}
	var text []byte
	var failed error                  // fn's error: fn is not called again after one
	var logprobs, pendingLP []Logprob // all delivered; of tokens whose text is not passed on yet
	send := func(s string) error {
		if s == "" || failed != nil {
			return failed
		}
		text = append(text, s...)
		if len(pendingLP) > 0 {
			logprobs = append(logprobs, pendingLP...)
			if req.OnLogprobs != nil {
				req.OnLogprobs(pendingLP)
			}
			pendingLP = nil
		}
		if fn != nil {
			failed = fn(s)
		}
		return failed
	}
	hit := false
	f := flags{noTruncate: req.NoTruncate, noShift: req.NoShift, format: req.Format, media: media}
	if media != nil {
		// Image rows can be neither cut nor shifted: their positions are the image's.
		f.noTruncate, f.noShift = true, true
	}
	if req.OnPrompt != nil {
		f.onPrompt = func(fit PromptFit) {
			fit.MessagesDropped = dropped
			req.OnPrompt(fit)
		}
	}
	for _, t := range req.EndTokens {
		if id, ok := e.Tokenizer.TokenID(t); ok {
			f.end = append(f.end, id)
		}
	}
	if req.Logprobs {
		f.topLogprobs = req.TopLogprobs
		f.logprob = func(lp Logprob) { pendingLP = append(pendingLP, lp) }
	}
	res, err := e.run(ctx, prompt, o, numCtx, f, func(id int32) (bool, error) {
		var out string
		out, hit = stops.push(dec.Add(id))
		return hit, send(out)
	})
	if res == nil {
		return nil, err
	}
	res.MessagesDropped = dropped
	if media != nil {
		res.Images, res.ImagesEncoded, res.EncodeDuration = len(media.Spans), enc.encoded, enc.took
		for _, s := range media.Spans {
			res.ImageTokens += s.N()
		}
		res.PromptDuration += enc.took
		res.TotalDuration += enc.took
	}
	if !hit {
		// Generation ended otherwise (EOS, length, error): what was held back is final,
		// unless the decoder's last bytes complete a stop string.
		out, last := stops.push(dec.Flush())
		if !last {
			out += stops.flush()
		} else {
			res.DoneReason = "stop"
		}
		if serr := send(out); err == nil {
			err = serr
		}
	}
	res.Text = string(text)
	res.StopSequence = stops.matched
	res.Logprobs = logprobs
	if req.WantContext {
		res.Context = append(slices.Clone(prompt), e.Tokenizer.Encode(res.Text, false)...)
	}
	return res, err
}

// GenerateTokens generates from prompt ids, calling fn with each new id (EOS
// excluded); fn may end generation by returning true. It needs no tokenizer, and
// ignores o.Stop.
func (e *Engine) GenerateTokens(ctx context.Context, prompt []int32, o Options, fn func(id int32) (stop bool, err error)) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if len(prompt) == 0 {
		return nil, errors.New("generate: the prompt is empty")
	}
	return e.run(ctx, prompt, o, e.numCtx(o), flags{}, fn)
}

// numCtx is the request's num_ctx, at most the context settled at load.
func (e *Engine) numCtx(o Options) int {
	if n := o.NumCtx; e.maxCtx > 0 && n > e.maxCtx {
		e.log.Warn("requested context size too large for model", "num_ctx", n, "max", e.maxCtx)
		return e.maxCtx
	}
	return o.NumCtx
}

// chatPrompt renders the messages and tokenizes them. When they do not fit in
// numCtx, the oldest messages are dropped, as Ollama does: system messages and the
// last message are always kept.
func (e *Engine) chatPrompt(req Request, numCtx int, truncate bool) ([]int32, int, error) {
	if e.Template == nil {
		return nil, 0, fmt.Errorf("%s has no chat template: send a raw prompt instead", e.Dir)
	}
	// size is a rendered prompt's length once its image placeholders become the images' tokens
	// (the last images, as withImages places them).
	size := func(ids []int32) int { return len(ids) }
	if v := e.Model.Vision(); v != nil && len(req.Images) > 0 {
		tok := v.ImageTokenID()
		extra := make([]int, len(req.Images))
		for i, im := range req.Images {
			extra[i] = max(v.Processor().ImageTokens(im.W, im.H)-1, 0)
		}
		size = func(ids []int32) int {
			n, k := len(ids), 0
			for _, id := range ids {
				if id == tok {
					k++
				}
			}
			for i := max(len(extra)-k, 0); i < len(extra); i++ {
				n += extra[i]
			}
			return n
		}
	}
	render := func(start int) ([]int32, error) {
		var msgs []template.Message
		for _, m := range req.Messages[:start] {
			if m["role"] == "system" {
				msgs = append(msgs, m)
			}
		}
		msgs = append(msgs, req.Messages[start:]...)
		s, err := e.Template.Apply(msgs, template.Options{AddGenerationPrompt: true, Tools: req.Tools, Kwargs: req.TemplateKwargs})
		if err != nil {
			return nil, err
		}
		if len(req.Images) > 0 {
			s = e.frameImages(s)
		}
		return e.Tokenizer.Encode(s, false), nil
	}
	ids, err := render(0)
	if err != nil {
		return nil, 0, err
	}
	last := len(req.Messages) - 1
	if size(ids) <= numCtx || last == 0 || !truncate {
		return ids, 0, nil
	}
	// The smallest start that fits; the last message is kept even if nothing fits.
	lo, hi := 1, last
	for lo < hi {
		mid := (lo + hi) / 2
		t, err := render(mid)
		if err != nil {
			return nil, 0, err
		}
		if size(t) <= numCtx {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	dropped := 0
	for _, m := range req.Messages[:lo] {
		if m["role"] != "system" {
			dropped++
		}
	}
	e.log.Warn("truncating input messages which exceed context length", "truncated", dropped, "num_ctx", numCtx)
	ids, err = render(lo)
	return ids, dropped, err
}

// truncatePrompt fits a prompt into the context as Ollama's runner does: when it
// fills the window, the first numKeep tokens stay and the oldest tokens after them
// go, leaving the prompt at numKeep + (numCtx-numKeep)/2 tokens so that half the
// window remains for the answer. numKeep is capped at half the window so the newest
// tokens (the question) are never all dropped.
func truncatePrompt(prompt []int32, numCtx, numKeep int) []int32 {
	if len(prompt) < numCtx {
		return prompt
	}
	numKeep = min(numKeep, numCtx/2)
	limit := numKeep + (numCtx-numKeep)/2
	out := slices.Clone(prompt[:numKeep])
	return append(out, prompt[len(prompt)-(limit-numKeep):]...)
}

// run is the generation loop: chunked prefill, then sample, emit and decode one token
// at a time. emit returns true to stop.
// flags are a request's switches that Options do not carry.
// logprob, when set, is given each generated token's log-probabilities (with topLogprobs
// alternatives), before emit.
type flags struct {
	noTruncate, noShift bool
	logprob             func(Logprob)
	topLogprobs         int
	format              *Format // structured output (format.go)
	end                 []int32 // more tokens that end generation as EOS does
	onPrompt            func(PromptFit)
	media               *model.Media // the prompt's images (images.go); nil: none
}

func (e *Engine) run(ctx context.Context, prompt []int32, o Options, numCtx int, f flags, emit func(id int32) (bool, error)) (*Result, error) {
	start := time.Now()
	res := &Result{}
	if e.maxBatch > 0 && o.NumBatch > e.maxBatch {
		o.NumBatch = e.maxBatch
	}
	if f.noTruncate && len(prompt) >= numCtx {
		return nil, &ContextError{PromptTokens: len(prompt), NumCtx: numCtx}
	}
	if p := truncatePrompt(prompt, numCtx, o.NumKeep); len(p) < len(prompt) {
		res.PromptTruncated = len(prompt) - len(p)
		e.log.Warn("truncating input prompt", "limit", len(p), "prompt", len(prompt), "keep", min(o.NumKeep, numCtx/2), "new", len(p))
		prompt = p
	}
	res.PromptTokens = len(prompt)
	if f.onPrompt != nil {
		f.onPrompt(PromptFit{Tokens: len(prompt), NumCtx: numCtx, Truncated: res.PromptTruncated})
	}
	sampler, err := sample.New(o.sampling(numCtx))
	if err != nil {
		return nil, err
	}
	sampler.Accept(prompt...)
	ticket, err := e.coalesce(ctx, prompt) // coalesce.go
	if err != nil {
		return nil, err
	}
	defer ticket.release()
	if e.batch != nil {
		leave, err := e.batch.join(ctx)
		if err != nil {
			return nil, err
		}
		defer leave()
	}
	caches, err := e.kv(e.Model, numCtx)
	if err != nil {
		return nil, err
	}
	if f.media != nil {
		model.SetMedia(caches, f.media)
		defer model.SetMedia(caches, nil)
		o.NumDraft = 0 // drafts are text: none across images
	}
	pf := e.prefixBegin(caches, res)
	defer pf.end()
	if pf != nil {
		pf.restored = ticket.restored
	}

	// prefill runs tokens through the caches num_batch at a time and returns the last
	// position's logits.
	prefill := func(tokens []int32) ([]float32, error) {
		var logits []float32
		offset := 0
		if f.media != nil {
			offset = seqLen(caches)
		}
		for i := 0; i < len(tokens); {
			end := chunkEnd(f.media, offset, i, o.NumBatch, len(tokens)) // an image is never split between chunks
			var err error
			if logits, err = e.forward(ctx, tokens[i:end], caches, nil); err != nil {
				return nil, err
			}
			i = end
		}
		return logits, nil
	}
	logits, err := pf.prefill(prompt, prefill)
	ticket.release() // its blocks are saved: requests sharing them go on
	if err != nil {
		res.TotalDuration = time.Since(start)
		return res, err
	}
	seq := slices.Clone(prompt) // what the caches hold
	meter := &kvMeter{e: e}
	meter.update(caches)
	defer meter.done()
	decodeStart := time.Now()
	res.PromptDuration = decodeStart.Sub(start)
	finish := func(reason string, err error) (*Result, error) {
		pf.finish(seq, caches)
		for _, c := range caches {
			if c != nil {
				res.KVBytes += c.Bytes()
			}
		}
		res.DoneReason = reason
		res.EvalCount = len(res.Tokens)
		res.EvalDuration = time.Since(decodeStart)
		res.TotalDuration = time.Since(start)
		return res, err
	}

	isEOS := make(map[int32]bool, len(e.eos))
	for _, id := range slices.Concat(e.eos, f.end) {
		isEOS[id] = true
	}
	var gate *formatGate
	if f.format != nil {
		gate = e.newFormatGate(f.format, isEOS)
	}
	var spec *lookup // prompt lookup (spec.go); nil: plain decoding
	var ver *verifier
	var dm *draftModel // the draft model's sequence (draft.go); nil: prompt lookup drafts
	if o.NumDraft > 0 && e.Model.Verifies() {
		spec = newLookup(prompt, o.NumDraft)
		ver = newVerifier(e.Model, caches)
		if e.draft != nil {
			// A draft that cannot start (its KV policy refusing caches under memory pressure)
			// leaves the sequence to prompt lookup rather than failing it.
			if dm, err = newDraftModel(e.draft, o, numCtx); err != nil {
				e.log.Warn("the draft model cannot start: prompt lookup drafts instead", "draft_model", e.draft.Dir, "err", err)
				dm, err = nil, nil
			}
		}
	}
	defer func() {
		if spec != nil {
			res.DraftTokens, res.DraftAccepted, res.DraftPasses = spec.drafted, spec.accepted, spec.passes
		}
	}()
	type ending struct {
		reason string
		err    error
	}
	// take decides the token at the position whose logits are given (draft: a drafted
	// token to verify there, -1: none) and passes it on; end is set when generation ends
	// there.
	take := func(logits []float32, draft int32, q []sample.TokenProb) (id int32, kept bool, end *ending) {
		if err := ctx.Err(); err != nil {
			return -1, false, &ending{"", err}
		}
		if o.NumPredict >= 0 && len(res.Tokens) >= o.NumPredict {
			return -1, false, &ending{"length", nil}
		}
		if gate != nil {
			if gate.finished() {
				return -1, false, &ending{"stop", nil} // the JSON value is complete
			}
			if err := gate.apply(logits); err != nil {
				return -1, false, &ending{"", err}
			}
		}
		var err error
		switch {
		case draft >= 0 && q != nil:
			id, kept, err = sampler.SampleDraftFrom(logits, draft, q)
		case draft >= 0:
			id, kept, err = sampler.SampleDraft(logits, draft)
		default:
			id, err = sampler.Sample(logits)
		}
		if err != nil {
			return -1, false, &ending{"", err}
		}
		if isEOS[id] {
			return -1, false, &ending{"stop", nil}
		}
		if gate != nil {
			if err := gate.accept(id); err != nil {
				return -1, false, &ending{"", err}
			}
		}
		if f.logprob != nil {
			f.logprob(sample.Logprobs(logits, id, f.topLogprobs)) // the logits the sampler saw
		}
		sampler.Accept(id)
		res.Tokens = append(res.Tokens, id)
		if len(res.Tokens)%64 == 0 {
			meter.update(caches)
		}
		if spec != nil {
			spec.push(id)
		}
		stop, err := emit(id)
		if err != nil {
			return -1, false, &ending{"", err}
		}
		if stop {
			return -1, false, &ending{"stop", nil}
		}
		if o.NumPredict >= 0 && len(res.Tokens) >= o.NumPredict {
			return -1, false, &ending{"length", nil}
		}
		return id, kept, nil
	}
	// done is the buffer the current logits live in, once they come from a decode step or
	// a verification pass (not the prefill, which the prefix cache may keep): seen by the
	// sampler, kept by no one, it goes back to the backend's pool with the next pass.
	var done []float32
	for {
		id, _, end := take(logits, -1, nil)
		if end != nil {
			return finish(end.reason, end.err)
		}
		// id is passed on and not yet in the caches; a rejected draft's replacement loops
		// back here.
		for {
			if caches[0].Len() >= numCtx {
				if o.NumPredict == -2 || f.noShift {
					return finish("length", nil) // "fill the context", or no shifting wanted
				}
				// Shift the context as Ollama does: keep num_keep tokens, drop half of the
				// rest, and go on. The kept tokens are prefilled again at their new positions.
				keep := min(o.NumKeep, numCtx/2)
				discard := (numCtx - keep) / 2
				e.log.Warn("context limit hit - shifting", "limit", numCtx, "input", len(seq), "keep", keep, "discard", discard)
				seq = append(seq[:keep:keep], seq[keep+discard:]...)
				if caches, err = e.kv(e.Model, numCtx); err != nil {
					return finish("", err)
				}
				if _, err = prefill(seq); err != nil {
					return finish("", err)
				}
				if ver != nil {
					ver = newVerifier(e.Model, caches)
				}
				dm = nil // its caches hold the text before the shift: prompt lookup from here
			}
			var draft []int32
			var qs [][]sample.TokenProb
			drafted := 0 // the history's length when drafting (the draft model's caches follow it)
			// The pass's cost as the ledger counts it: drafting, verifying and cutting back,
			// not the sampling that each token costs whether it was drafted or not.
			t0 := time.Now()
			if spec != nil && (e.batch == nil || e.batch.alone()) {
				n := spec.allow(draftRoom(o, len(res.Tokens), caches, numCtx))
				drafted = len(spec.hist)
				if dm == nil {
					draft = spec.lookup(n)
				} else if draft, qs, err = dm.propose(ctx, spec.hist, n); err != nil {
					return finish("", err)
				}
			}
			if len(draft) == 0 {
				t0 = time.Now()
				if logits, err = e.forward(ctx, []int32{id}, caches, done); err != nil {
					return finish("", err)
				}
				if spec != nil {
					spec.step(time.Since(t0))
				}
				done = logits
				seq = append(seq, id)
				break
			}
			rows, err := ver.pass(ctx, append([]int32{id}, draft...), caches)
			if err != nil {
				return finish("", err)
			}
			cost := time.Since(t0)
			if done != nil {
				e.Model.Recycle(done)
			}
			done = rows
			seq = append(seq, id)
			vocab := len(rows) / (len(draft) + 1)
			kept, next := 0, int32(-1)
			for j, d := range draft {
				var q []sample.TokenProb
				if qs != nil {
					q = qs[j]
				}
				tok, ok, end := take(rows[j*vocab:(j+1)*vocab], d, q)
				if end != nil {
					spec.record(len(draft), kept, cost)
					if err := ver.cut(ctx, caches, len(seq), seq); err != nil && end.err == nil {
						end.err = err
					}
					return finish(end.reason, end.err)
				}
				if !ok {
					next = tok
					break
				}
				seq = append(seq, d)
				kept++
			}
			t1 := time.Now()
			if err := ver.cut(ctx, caches, len(seq), seq); err != nil {
				return finish("", err)
			}
			if dm != nil {
				if err := dm.cut(drafted + kept); err != nil {
					return finish("", err)
				}
			}
			spec.record(len(draft), kept, cost+time.Since(t1))
			if next < 0 {
				logits = rows[len(draft)*vocab:]
				break
			}
			id = next
		}
	}
}

// draftRoom is the most tokens a draft may have after the token about to go into caches:
// num_draft, what num_predict still allows, room in the context, and no pass that
// crosses the length at which a cache turns from fp16 to its quantized spec (its earlier
// rows would attend over codes a step-by-step decode does not have yet).
func draftRoom(o Options, generated int, caches []kvstore.Layer, numCtx int) int {
	n := o.NumDraft
	if o.NumPredict >= 0 {
		n = min(n, o.NumPredict-generated)
	}
	start := caches[0].Len() // the pass fills start+1+n positions
	n = min(n, numCtx-start-1)
	if at := kvstore.NextConversion(caches); at >= 0 {
		n = min(n, at-start-2)
	}
	return n
}

func mergeIDs(a, b []int32) []int32 {
	out := slices.Clone(a)
	for _, id := range b {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}
