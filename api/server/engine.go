package server

// The Loader and Model the server uses in production: the runner engine (runner.Engine) behind the
// server's small Model interface.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/backend"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/pipeline"
	"github.com/mlxg/mlxg/runner/residency"
	"github.com/mlxg/mlxg/text/template"
)

// EngineLoader loads models with the runner engine.
type EngineLoader struct {
	// Backend runs every model; nil means a CPU backend with Threads goroutines per model.
	Backend compute.Backend
	Threads int
	// ForModel, when set, gives each model a backend of its own instead (runner/backend's
	// Choice.ForModel: Metal's weights wrap the model's mmap and are held until that backend
	// closes). It is released with backend.Release before the model closes, and is given the
	// KV policy's plan (backend.ApplyPlan: Metal's memory limits) before the weights load.
	ForModel func() (compute.Backend, error)
	// KV chooses each model's KV cache layout and context from the memory it reads; nil means fp16
	// full-attention caches sized by the request's num_ctx.
	KV     *kvstore.Policy
	Logger *slog.Logger
	// Parallel above 1 batches up to that many concurrent requests per model (the scheduler's NumParallel,
	// MLXG_NUM_PARALLEL): their decode steps share one forward pass (runner's continuous batching). The KV
	// policy may lower it to the sequences whose KV cache fits in memory at the model's context.
	Parallel int
	// Prefix shares prompt prefixes between requests (RAM and SSD tiers); nil: none. Its RAM
	// budget is the KV policy's prefix budget, set on each load and each request.
	Prefix *kvstore.PrefixCache
	// Shape, when set, turns a model's shape into this process's share of it before the KV
	// policy plans (a model split over several machines: rank 0's layers and weights).
	Shape func(dir string, shape kvstore.ModelShape, numCtx int) (kvstore.ModelShape, error)
	// Pipeline, when set, loads every model split over the leader's machines
	// (runner.LoadOptions.Pipeline).
	Pipeline *pipeline.Leader
	// WeightBudget, when positive, loads every model with quantized experts or layers in streaming mode
	// with at most this many bytes of weights in memory (MLXG_WEIGHT_BUDGET); 0: only a
	// model whose weights do not fit streams, with the budget the KV policy leaves.
	// StreamPolicy is the expert cache's eviction policy.
	WeightBudget int64
	StreamPolicy residency.Policy
}

// kvLoad is the KV policy's plan for a load and the shape it was made for.
type kvLoad struct {
	shape  kvstore.ModelShape
	plan   kvstore.Plan
	vision model.VisionMemory
	// imagePixels, when positive, is the pixel budget lowered to fit (runner.LoadOptions.ImagePixels).
	imagePixels int
}

// minImagePixels is the least pixel budget the plan lowers a vision model's to before it refuses the load (or
// a sixteenth of the checkpoint's, if less): a megapixel, 1,024 tokens at Qwen3.5's 32-pixel merged patches.
const minImagePixels = 1 << 20

// kvPlan reads the model's shape and asks the KV policy for its layout at numCtx, counting freed
// bytes (models the scheduler would unload first) as available; weights, when positive, is what
// the weights take in memory (a model in streaming mode: its budget).
func (l *EngineLoader) kvPlan(m *registry.LocalModel, numCtx int, freed, weights int64) (*kvLoad, error) {
	return l.kvPlanWith(m, numCtx, freed, func(s *kvstore.ModelShape) {
		if weights > 0 {
			s.WeightBytes = min(s.WeightBytes, weights)
		}
	})
}

// kvPlanWith is kvPlan with the shape changed by adjust before the policy plans.
func (l *EngineLoader) kvPlanWith(m *registry.LocalModel, numCtx int, freed int64, adjust func(*kvstore.ModelShape)) (*kvLoad, error) {
	data, err := os.ReadFile(filepath.Join(m.Dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Dir, err)
	}
	shape, err := kvstore.ShapeFromConfig(data, m.Size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Dir, err)
	}
	vm, err := model.VisionMemoryOf(m.Dir)
	if err != nil {
		return nil, err
	}
	shape.Vision = vm.Activations()
	if l.Shape != nil {
		if shape, err = l.Shape(m.Dir, shape, numCtx); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Dir, err)
		}
	}
	adjust(&shape)
	plan, err := l.KV.PlanFreeing(m.Dir, shape, numCtx, freed)
	var short *kvstore.MemoryError
	if vm.Encode > 0 && errors.As(err, &short) {
		// Encoding the largest image the checkpoint allows does not fit beside the model:
		// lower the pixel budget, halving it, until it does (as a context is sized from
		// memory), down to a megapixel or a sixteenth of the checkpoint's budget, whichever
		// is less; below that the load is refused.
		for px := vm.MaxPixels / 2; px >= min(minImagePixels, vm.MaxPixels/16); px /= 2 {
			low, lerr := model.VisionMemoryFor(m.Dir, px)
			if lerr != nil {
				return nil, lerr
			}
			shape.Vision = low.Activations()
			if p, perr := l.KV.PlanFreeing(m.Dir, shape, numCtx, freed); perr == nil {
				l.logger().Warn("encoding the largest image does not fit in memory: the image pixel budget is lowered",
					"model", m.Dir, "max_pixels", low.MaxPixels, "of", vm.MaxPixels, "encode_peak", low.Encode, "why", err)
				return &kvLoad{shape: shape, plan: p, vision: low, imagePixels: low.MaxPixels}, nil
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return &kvLoad{shape: shape, plan: plan, vision: vm}, nil
}

// checkArchitecture refuses, before any memory is planned, a model whose architecture none registered runs
// (one another tool downloaded, or pulled before mlxg ran it): an unknown architecture's shape is no guide
// to its memory, and its error is the 400 that names the model_type (registry.ErrUnsupported).
func checkArchitecture(m *registry.LocalModel) error {
	data, err := os.ReadFile(filepath.Join(m.Dir, "config.json"))
	if err != nil {
		return fmt.Errorf("%s: %w", m.Dir, err)
	}
	if err := model.CheckConfig(data); err != nil {
		return fmt.Errorf("model %s: %w", m.Name, err)
	}
	return nil
}

// fp16KV is the size of fp16 keys and values for numCtx tokens on every KV layer.
func fp16KV(info *registry.ModelInfo, numCtx int) int64 {
	return int64(len(info.KVLayers())) * int64(info.KVHeads) * int64(info.HeadDim) * 2 * 2 * int64(numCtx)
}

// batchCap is how many sequences a model batches: parallel, at most the one sequence the plan budgets plus
// as many more as its headroom holds KV caches of plan.KVBytes (one sequence's at the model's context).
func batchCap(parallel int, plan kvstore.Plan) int {
	if parallel <= 1 || plan.KVBytes <= 0 {
		return parallel
	}
	return min(parallel, 1+int(max(plan.Headroom(), 0)/plan.KVBytes))
}

// Plan settles the load: under the KV policy, its plan (the layout, and the context: numCtx at most,
// lowered to the model's maximum and to what fits); without one, fp16 caches at numCtx, at most the
// model's maximum. The peak is weights, overhead and the KV cache of one sequence. Under critical
// memory pressure the KV policy refuses, and so does Plan.
func (l *EngineLoader) Plan(m *registry.LocalModel, numCtx int, freed int64) (*LoadPlan, error) {
	if err := checkArchitecture(m); err != nil {
		return nil, err
	}
	if numCtx <= 0 && (l.KV == nil || l.Pipeline != nil) {
		// Sized from memory needs the KV policy, and a split model's memory is every rank's:
		// without either, the floor the policy keeps (at most the model's maximum, below).
		numCtx = kvstore.AutoFloor
	}
	if l.WeightBudget > 0 && l.Pipeline == nil {
		if p, ok, err := l.planStreaming(m, numCtx, freed); ok || err != nil {
			return p, err
		}
	}
	if l.KV != nil {
		kv, err := l.kvPlan(m, numCtx, freed, 0)
		if err != nil && l.Pipeline == nil {
			// The weights do not fit: the model streams its experts (or its dense layers) instead.
			if p, ok, serr := l.planStreaming(m, numCtx, freed); ok && serr == nil {
				l.logger().Info("the weights do not fit in memory: loading in streaming mode", "model", m.Dir,
					"weights", m.Size, "budget", p.WeightBudget, "why", err)
				return p, nil
			}
		}
		if err != nil {
			return nil, err
		}
		return &LoadPlan{Model: m, Context: kv.plan.Context, ContextReason: kv.plan.ContextReason, Size: kv.plan.Weights + kv.plan.KVBytes,
			Peak: kv.plan.Peak(), KVSpec: kv.plan.Layout.String(), Vision: kv.vision, kv: kv}, nil
	}
	info, err := registry.ReadInfo(m.Dir)
	if err != nil {
		return nil, err
	}
	if info.ContextLength > 0 {
		numCtx = min(numCtx, info.ContextLength)
	}
	numCtx = min(numCtx, maxUnknownContext)
	size := m.Size + fp16KV(info, numCtx)
	vm, err := model.VisionMemoryOf(m.Dir)
	if err != nil {
		return nil, err
	}
	return &LoadPlan{Model: m, Context: numCtx, ContextReason: fixedContextReason(numCtx, info.ContextLength), Size: size, Peak: size + vm.Activations(),
		KVSpec: "fp16", Vision: vm}, nil
}

// maxUnknownContext bounds a num_ctx for a model whose config.json states no maximum, planned without
// the KV policy (which bounds it the same way): 10^9 asked of such a model plans no terabytes.
const maxUnknownContext = 1 << 20

// fixedContextReason says why a model planned without the KV policy has context n (the model's maximum
// is max, 0 when unknown).
func fixedContextReason(n, max int) string {
	if n == max {
		return fmt.Sprintf("the model's maximum %d", max)
	}
	return fmt.Sprintf("num_ctx %d", n)
}

// PlanDraft plans m with draft as its draft model: m's plan, plus the draft's weights and its
// KV cache at m's context. Under the KV policy the draft's layout is the policy's for the draft's
// own shape at that context (planned as if it were alone: the scheduler budgets the sum); without
// one, fp16 caches.
func (l *EngineLoader) PlanDraft(m, draft *registry.LocalModel, numCtx int, freed int64) (*LoadPlan, error) {
	p, err := l.Plan(m, numCtx, freed)
	if err != nil || draft == nil {
		return p, err
	}
	p.Draft = draft
	if l.KV != nil {
		kv, err := l.kvPlan(draft, p.Context, freed, 0)
		if err != nil {
			return nil, fmt.Errorf("draft model %s: %w", draft.Name, err)
		}
		p.draftKV, p.DraftKVSpec, p.draftBytes = kv, kv.plan.Layout.String(), kv.plan.Weights+kv.plan.KVBytes
		p.Size += p.draftBytes
		p.Peak += p.draftBytes
		return p, nil
	}
	info, err := registry.ReadInfo(draft.Dir)
	if err != nil {
		return nil, err
	}
	p.draftBytes = draft.Size + fp16KV(info, p.Context)
	p.Size, p.Peak, p.DraftKVSpec = p.Size+p.draftBytes, p.Peak+p.draftBytes, "fp16"
	return p, nil
}

// Load loads the checkpoint with its tokenizer and chat template, and its draft model when the
// plan has one.
func (l *EngineLoader) Load(ctx context.Context, p *LoadPlan) (Model, error) {
	m := p.Model
	info, err := registry.ReadInfo(m.Dir)
	if err != nil {
		return nil, err
	}
	be := l.Backend
	if l.ForModel != nil {
		if be, err = l.ForModel(); err != nil {
			return nil, fmt.Errorf("starting a compute backend for %s: %w", m.Dir, err)
		}
	}
	if be == nil {
		be = cpu.New(l.Threads)
	}
	release := func() {
		if l.ForModel != nil {
			if err := backend.Release(be); err != nil {
				l.logger().Warn("releasing the compute backend", "model", m.Dir, "err", err)
			}
		}
	}
	em, err := l.load(p, info, be)
	if err != nil {
		release()
		return nil, err
	}
	em.release = release
	if p.Draft != nil {
		if err := l.loadDraft(em, p, be); err != nil {
			em.Close()
			return nil, err
		}
	}
	return em, nil
}

// loadDraft loads p's draft model on the target's backend, its caches from the KV policy as the
// target's, and makes it draft for em. It closes with em.
func (l *EngineLoader) loadDraft(em *engineModel, p *LoadPlan, be compute.Backend) error {
	d := p.Draft
	opts := runner.LoadOptions{Backend: be, Logger: l.Logger, Context: p.Context}
	if kv := p.draftKV; kv != nil {
		seqs := l.KV.Sequences(d.Dir, kv.shape, kv.plan, nil)
		opts.KVCache = func(_ *model.Model, n int) ([]kvstore.Layer, error) {
			caches, _, err := seqs.Caches(n)
			return caches, err
		}
	}
	de, err := runner.Load(d.Dir, opts)
	if err != nil {
		return fmt.Errorf("loading the draft model %s of %s: %w", d.Name, p.Model.Name, err)
	}
	if err := em.e.SetDraft(de); err != nil {
		de.Close()
		if p.DraftOptional {
			l.logger().Warn("the server's draft model cannot draft for this model: it runs without one", "model", p.Model.Name, "draft_model", d.Name, "err", err)
			em.size, em.peak = em.size-p.draftBytes, em.peak-p.draftBytes
			if em.gpu > 0 {
				em.gpu = em.size
			}
			return nil
		}
		return errorf(http.StatusBadRequest, "%s cannot draft for %s: %v", d.Name, p.Model.Name, err)
	}
	em.draft, em.draftName = de, d.Name
	return nil
}

func (l *EngineLoader) logger() *slog.Logger {
	if l.Logger != nil {
		return l.Logger
	}
	return slog.Default()
}

func (l *EngineLoader) load(p *LoadPlan, info *registry.ModelInfo, be compute.Backend) (*engineModel, error) {
	dir := p.Model.Dir
	cb := &captureBackend{Backend: be}
	em := &engineModel{cb: cb, numCtx: p.Context, ctxReason: p.ContextReason, template: info.ChatTemplate, kvSpec: p.KVSpec, size: p.Size, peak: p.Peak,
		loadPlan: p.kv, backend: be.Name(), vision: p.Vision}
	opts := runner.LoadOptions{Backend: cb, Logger: l.Logger, Prefix: l.Prefix, Parallel: l.Parallel, Context: p.Context,
		Pipeline: l.Pipeline, WeightBudget: p.WeightBudget, StreamPolicy: l.StreamPolicy,
		MaxBatch: p.MaxBatch}
	if n := be.Name(); strings.HasPrefix(n, "cpu") {
		// The CPU backend's activations live in the Go heap, whose limit the loan moves; MLX's
		// are its own.
		opts.DecodeLoan, opts.DecodeRows = p.DecodeLoan, decodeRows
	}
	if p.kv != nil {
		opts.ImagePixels = p.kv.imagePixels
	}
	em.weights = p.Weights
	if kv := p.kv; kv != nil {
		opts.Parallel = batchCap(l.Parallel, kv.plan)
		if opts.Parallel < l.Parallel {
			l.logger().Warn("fewer sequences batched than MLXG_NUM_PARALLEL: the KV caches of more do not fit in memory",
				"model", dir, "num_parallel", l.Parallel, "batched", opts.Parallel, "kv_per_sequence", kv.plan.KVBytes, "headroom", kv.plan.Headroom())
		}
		if err := backend.ApplyPlan(be, kv.plan); err != nil {
			return nil, fmt.Errorf("%s: setting the backend's memory limits: %w", be.Name(), err)
		}
		if l.Prefix != nil {
			l.Prefix.SetBudget(kv.plan.PrefixBudget)
		}
		seqs := l.KV.Sequences(dir, kv.shape, kv.plan, func(plan kvstore.Plan) {
			em.seqPlan.Store(&plan) // for the PERF line
			// A streamed model's expert cache follows the pressure.
			followPressure(em.residency(), p, &plan)
			if l.Prefix != nil {
				// The budget follows the pressure read for this request: it shrinks under
				// warn, and critical (budget 0) drops the RAM blocks no sequence holds.
				l.Prefix.SetBudget(plan.PrefixBudget)
			}
		})
		if p.WeightBudget > 0 {
			seqs.Freeing(em.cacheBytes)
		}
		opts.KVCache = func(_ *model.Model, n int) ([]kvstore.Layer, error) {
			caches, _, err := seqs.Caches(n)
			return caches, err
		}
	}
	e, err := runner.Load(dir, opts)
	if err != nil {
		return nil, err
	}
	em.e = e
	limitHeap(p)
	if n := be.Name(); n != "" && !strings.HasPrefix(n, "cpu") && !strings.HasPrefix(n, "mlx-cpu") {
		em.gpu = p.Size // Metal: unified memory, all of it GPU-visible (MLX's CPU backend: none)
	}
	em.fim = fimTokens(e.Tokenizer.TokenID)
	return em, nil
}

// fimConventions are the fill-in-the-middle token sets (prefix, suffix, middle; prompt order
// prefix·text·suffix·text·middle) of the model families that have them: Qwen2.5-Coder and
// Qwen3, StarCoder-style, DeepSeek-Coder.
var fimConventions = [][3]string{
	{"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"},
	{"<fim_prefix>", "<fim_suffix>", "<fim_middle>"},
	{"<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"},
}

// fimTokens returns the first convention whose three tokens the tokenizer has, else zero.
func fimTokens(id func(string) (int32, bool)) [3]string {
next:
	for _, fim := range fimConventions {
		for _, t := range fim {
			if _, ok := id(t); !ok {
				continue next
			}
		}
		return fim
	}
	return [3]string{}
}

// engineModel is a runner.Engine as a Model.
type engineModel struct {
	e         *runner.Engine
	cb        *captureBackend
	numCtx    int
	ctxReason string
	used      atomic.Pointer[ContextUse] // the latest finished request's
	template  string
	fim       [3]string
	kvSpec    string
	size      int64 // resident: weights and KV at numCtx
	peak      int64 // the policy's predicted peak
	gpu       int64
	seqPlan   atomic.Pointer[kvstore.Plan] // the newest sequence's KV plan; nil without a KV policy
	loadPlan  *kvLoad                      // the plan the model loaded with, for /api/status; nil without a KV policy
	backend   string                       // the compute backend's name
	release   func()                       // the model's own backend, released before the model closes
	draft     *runner.Engine               // the draft model (nil: none), closed with the model
	draftName string
	// mu: generations share the model (RLock); an embedding takes it alone (Lock), since it reads hidden
	// states through the backend wrapper.
	mu sync.RWMutex
	// weights is the bytes of all the weights (a model in streaming mode holds fewer).
	weights int64
	// vision is the plan's vision tower memory (zero for a text model).
	vision model.VisionMemory
}

// residency is the model's weight residency manager, nil when its weights are all mapped.
func (m *engineModel) residency() *residency.Manager {
	if m.e == nil {
		return nil
	}
	return m.e.Model.Residency()
}

// Close releases the model's backend first (Metal's arrays wrap the checkpoint's mmap), then the model.
func (m *engineModel) Close() error {
	if m.release != nil {
		m.release()
	}
	err := m.e.Close()
	if m.draft != nil {
		err = errors.Join(err, m.draft.Close())
	}
	return err
}

func (m *engineModel) Info() LoadedInfo {
	info := LoadedInfo{ContextLength: m.numCtx, ContextReason: m.ctxReason, Used: m.used.Load(), ChatTemplate: m.template, FIM: m.fim, Size: m.size, Peak: m.peak, GPUSize: m.gpu, KVSpec: m.kvSpec, Draft: m.draftName}
	if st, ok := m.e.BatchStats(); ok {
		info.Batch = &st
	}
	info.Ranks = m.e.Model.Ranks()
	if m.e.Model.Vision() != nil {
		v := m.vision
		info.Vision = &v
	}
	if res := m.residency(); res != nil {
		st := res.Stats()
		info.Stream, info.Weights = &st, m.weights
		if res.Dense() {
			info.KeptLayers, info.Layers = res.KeptLayers()
		}
	}
	return info
}

func toTemplate(messages []map[string]any, tools []json.RawMessage) ([]template.Message, []any) {
	msgs := make([]template.Message, len(messages))
	for i, msg := range messages {
		msgs[i] = msg
	}
	var ts []any
	for _, t := range tools {
		ts = append(ts, t)
	}
	return msgs, ts
}

func (m *engineModel) RenderChat(messages []map[string]any, tools []json.RawMessage, kwargs map[string]any) (string, error) {
	if m.e.Template == nil {
		return "", fmt.Errorf("%s has no chat template: use /api/generate with raw set", m.e.Dir)
	}
	msgs, ts := toTemplate(messages, tools)
	return m.e.Template.Apply(msgs, template.Options{AddGenerationPrompt: true, Tools: ts, Kwargs: kwargs})
}

func (m *engineModel) Generate(ctx context.Context, in GenerateInput, emit func(string) error) (GenerateStats, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	o := toRunnerOptions(in.Options)
	o.NumCtx = m.numCtx
	msgs, ts := toTemplate(in.Messages, in.Tools)
	if m.e.Template == nil && len(msgs) > 0 {
		return GenerateStats{}, errorf(http.StatusBadRequest, "this model has no chat template: use /api/generate with raw set")
	}
	req := runner.Request{Messages: msgs, Tools: ts, TemplateKwargs: in.Kwargs, Prompt: in.Prompt,
		Options: o, Format: in.Format, Logprobs: in.Logprobs, TopLogprobs: in.TopLogprobs, WantContext: in.WantContext}
	req.NoTruncate, req.NoShift, req.EndTokens = in.NoTruncate, in.NoShift, in.EndTokens
	req.SpecialTokens = in.SpecialTokens
	req.OnPrompt = in.OnPrompt
	req.Images = in.Images
	if in.OnLogprobs != nil {
		req.OnLogprobs = func(lps []runner.Logprob) { in.OnLogprobs(toLogprobs(m.e.Tokenizer, lps)) }
	}
	vocab := max(m.e.Model.Config.VocabSize, m.e.Tokenizer.VocabSize())
	for i, id := range in.Context {
		if id < 0 || id >= vocab {
			return GenerateStats{}, errorf(http.StatusBadRequest, "context[%d] is %d, not a token of this model (vocabulary of %d): send back the context this model returned", i, id, vocab)
		}
		req.Context = append(req.Context, int32(id))
	}
	var before residency.Stats
	rm := m.residency()
	if rm != nil {
		before = rm.Stats()
	}
	res, err := m.e.Generate(ctx, req, emit)
	if res == nil {
		return GenerateStats{}, err
	}
	st := GenerateStats{PromptTokens: res.PromptTokens, PromptEvalDuration: res.PromptDuration,
		EvalTokens: res.EvalCount, EvalDuration: res.EvalDuration, DoneReason: res.DoneReason,
		StopSequence: res.StopSequence, NumDraft: o.NumDraft, DraftTokens: res.DraftTokens, DraftAccepted: res.DraftAccepted}
	for _, id := range res.Context {
		st.Context = append(st.Context, int(id))
	}
	use := &ContextUse{Tokens: res.PromptTokens + res.EvalCount, KVBytes: res.KVBytes, Truncated: res.PromptTruncated,
		MessagesDropped: res.MessagesDropped}
	if res.Prefix != nil {
		use.Restored = res.Prefix.Cached
	}
	m.used.Store(use)
	st.Truncated, st.MessagesDropped = res.PromptTruncated, res.MessagesDropped
	if res.PromptTruncated > 0 {
		st.Perf = append(st.Perf, "prompt_truncated", res.PromptTruncated)
	}
	if res.MessagesDropped > 0 {
		st.Perf = append(st.Perf, "messages_dropped", res.MessagesDropped)
	}
	if res.Images > 0 {
		st.Perf = append(st.Perf, "images", res.Images, "image_tokens", res.ImageTokens, "images_encoded", res.ImagesEncoded,
			"encode_ms", res.EncodeDuration.Milliseconds())
	}
	// The spec and pressure the policy chose for the newest sequence (concurrent requests may
	// see each other's; the pressure is the machine's either way).
	spec, pressure := m.kvSpec, ""
	if p := m.seqPlan.Load(); p != nil {
		spec, pressure = p.Layout.String(), p.Memory.Pressure.String()
	}
	st.Perf = append(st.Perf, "num_ctx", m.numCtx, "kv", strconv.Quote(spec), "kv_bytes", res.KVBytes)
	if pressure != "" {
		st.Perf = append(st.Perf, "pressure", pressure)
	}
	if res.Prefix != nil {
		st.Perf = append(st.Perf, res.Prefix.Perf()...)
	}
	if rm != nil {
		st.Perf = append(st.Perf, streamPerf(before, rm.Stats(), res.EvalCount, rm.Dense())...)
	}
	return st, err
}

// Embed returns, for each input, the final (normed) hidden state of its last token, L2-normalized: last-token
// pooling, which is how decoder embedding models such as Qwen3-Embedding are read.
func (m *engineModel) Embed(ctx context.Context, inputs []string, truncate bool) ([][]float32, int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cb.start(m.e.Model.Config.VocabSize)
	defer m.cb.stop()
	total := 0
	out := make([][]float32, len(inputs))
	for i, s := range inputs {
		ids := m.e.Tokenizer.Encode(s, true)
		if len(ids) == 0 {
			return nil, 0, errorf(http.StatusBadRequest, "input[%d] is empty", i)
		}
		if len(ids) > m.numCtx {
			if !truncate {
				return nil, 0, errorf(http.StatusBadRequest, "input[%d] has %d tokens, more than the context length %d (set truncate or raise num_ctx)", i, len(ids), m.numCtx)
			}
			ids = ids[:m.numCtx]
		}
		total += len(ids)
		caches, err := m.e.Model.NewCaches(false)
		if err != nil {
			return nil, 0, err
		}
		const batch = 512
		for start := 0; start < len(ids); start += batch {
			if _, err := m.e.Model.Forward(ctx, ids[start:min(start+batch, len(ids))], caches, false); err != nil {
				return nil, 0, err
			}
		}
		h := m.cb.hidden()
		if len(h) == 0 {
			return nil, 0, fmt.Errorf("embedding: the model's output layer was not found (vocab %d)", m.e.Model.Config.VocabSize)
		}
		out[i] = normalize(h)
	}
	return out, total, nil
}

// captureBackend wraps a backend so that, while capturing, the input of the output layer (the Linear with
// vocab-size outputs: the final normed hidden states) is kept for Embed.
type captureBackend struct {
	compute.Backend
	mu    sync.Mutex
	vocab int // capturing when > 0
	last  []float32
}

func (b *captureBackend) start(vocab int) {
	b.mu.Lock()
	b.vocab, b.last = vocab, nil
	b.mu.Unlock()
}

func (b *captureBackend) stop() {
	b.mu.Lock()
	b.vocab, b.last = 0, nil
	b.mu.Unlock()
}

func (b *captureBackend) hidden() []float32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

// Recycle passes logits the engine is done with to the wrapped backend's pool
// (model.Model.Recycle): without it the wrapper would hide the CPU backend's pool, and every
// decode step of a served model would allocate its logits afresh (600 KiB a token at Qwen's
// vocabulary).
func (b *captureBackend) Recycle(x []float32) {
	if r, ok := b.Backend.(interface{ Recycle([]float32) }); ok {
		r.Recycle(x)
	}
}

func (b *captureBackend) NewContext() compute.Context {
	b.mu.Lock()
	vocab := b.vocab
	b.mu.Unlock()
	if vocab == 0 {
		return b.Backend.NewContext()
	}
	return &captureContext{Context: b.Backend.NewContext(), b: b, vocab: vocab}
}

type captureContext struct {
	compute.Context
	b     *captureBackend
	vocab int
	x     compute.Tensor
}

func (c *captureContext) Linear(x compute.Tensor, w compute.Weight) compute.Tensor {
	if out, _ := w.Dims(); out == c.vocab {
		c.x = x
	}
	return c.Context.Linear(x, w)
}

// Unwrap lets compute.Ext find the wrapped context's optional operations (mixture of
// experts, a pipeline's transfers).
func (c *captureContext) Unwrap() compute.Context { return c.Context }

// SetHidden implements model.HiddenSink: on a model split over several machines, the
// last rank computes the head's input and sends it to this one.
func (c *captureContext) SetHidden(h []float32) {
	c.b.mu.Lock()
	c.b.last = append([]float32(nil), h...)
	c.b.mu.Unlock()
}

func (c *captureContext) Float32s(t compute.Tensor) ([]float32, error) {
	if c.x != nil {
		rows, cols := c.x.Dims()
		if h, err := c.Context.Float32s(c.x); err == nil && rows > 0 && len(h) == rows*cols {
			c.b.mu.Lock()
			c.b.last = h[(rows-1)*cols:]
			c.b.mu.Unlock()
		}
	}
	return c.Context.Float32s(t)
}

func normalize(v []float32) []float32 {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	out := make([]float32, len(v))
	if sum == 0 {
		return out
	}
	inv := 1 / math.Sqrt(sum)
	for i, x := range v {
		out[i] = float32(float64(x) * inv)
	}
	return out
}

// toRunnerOptions converts a request's options for the engine.
func toRunnerOptions(o api.Options) runner.Options {
	return runner.Options{NumCtx: o.NumCtx, NumBatch: o.NumBatch, NumKeep: o.NumKeep, NumPredict: o.NumPredict,
		Temperature: o.Temperature, TopK: o.TopK, TopP: o.TopP, MinP: o.MinP, RepeatPenalty: o.RepeatPenalty,
		RepeatLastN: o.RepeatLastN, PresencePenalty: o.PresencePenalty, FrequencyPenalty: o.FrequencyPenalty,
		Seed: o.Seed, Stop: o.Stop, NumDraft: o.NumDraft}
}
