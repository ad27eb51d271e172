package server

import (
	"context"
	"encoding/json"
	"time"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/residency"
	"github.com/mlxg/mlxg/vision"
)

// Loader turns a model in the store into a running Model (EngineLoader: the runner engine). A load is
// planned once, before the scheduler makes room for it, and Load loads that plan: what the scheduler
// budgets is what loads.
type Loader interface {
	// Plan settles how the model loads when a request asks for a numCtx-token context: the context
	// it gets and the memory it takes. freed is the memory of loaded models the scheduler would
	// unload first, which the plan counts as available (0: nothing unloaded).
	Plan(m *registry.LocalModel, numCtx int, freed int64) (*LoadPlan, error)
	// Load loads the model as p says.
	Load(ctx context.Context, p *LoadPlan) (Model, error)
}

// LoadPlan is a Loader's plan for one load.
type LoadPlan struct {
	Model *registry.LocalModel
	// Context is the tokens every sequence of the model gets: the num_ctx asked for, at most the
	// model's maximum and, under the KV policy, what fits in memory.
	Context int
	// ContextReason says why Context is what it is (kvstore.Plan.ContextReason): sized from memory,
	// the model's maximum, or the num_ctx asked.
	ContextReason string
	Size          int64  // resident once loaded: weights and one sequence's KV cache at Context
	Peak          int64  // the predicted peak (Size plus activations and scratch): what the scheduler budgets
	KVSpec        string // the KV cache layout, as mlxg ps prints it
	// WeightBudget, when positive, loads the model in streaming mode: its experts are read
	// from the checkpoint through a RAM cache, and at most this many bytes of weights stay
	// in memory (runner.LoadOptions.WeightBudget). Experts is the bytes of the experts
	// (Dense: of the decoder layers' matrices, which stream instead), Weights of all the
	// weights.
	WeightBudget     int64
	Experts, Weights int64
	Dense            bool
	// Vision is what the checkpoint's vision tower takes (zero for a text model): its weights,
	// part of Size, and its activations, part of Peak.
	Vision model.VisionMemory
	// MaxBatch, when positive, caps the prompt tokens of a pass (runner.LoadOptions.MaxBatch):
	// a streamed model's activations are planned for that many rows.
	MaxBatch int
	// DecodeLoan is the part of those activations' memory that the expert cache uses while
	// no pass has more than decodeRows rows (runner.LoadOptions.DecodeLoan): under a
	// memory cgroup, on the CPU backend, for a cache that does not hold every expert.
	DecodeLoan int64

	// Draft is the draft model loaded with it for speculative decoding (nil: none), and
	// DraftKVSpec its KV cache layout; Size and Peak count its weights and KV cache.
	Draft       *registry.LocalModel
	DraftKVSpec string
	// DraftOptional (the server's default draft model): a draft that cannot draft for the model
	// is left out with a warning, and the model loads alone.
	DraftOptional bool
	draftBytes    int64 // what Size and Peak count for the draft

	kv      *kvLoad // the KV policy's plan; nil without a policy
	draftKV *kvLoad // the draft's
}

// DraftLoader is a Loader that also loads a model with a draft model (a ServerConfig.DraftModel
// or a Modelfile's draft_model): PlanDraft plans both, and Load loads both.
type DraftLoader interface {
	Loader
	PlanDraft(m, draft *registry.LocalModel, numCtx int, freed int64) (*LoadPlan, error)
}

// Model is a loaded model as the server drives it.
type Model interface {
	Close() error
	// Info describes the loaded model.
	Info() LoadedInfo
	// RenderChat renders messages (role, content, tool_calls, tool_call_id, name, reasoning_content) with the
	// model's chat template, with add_generation_prompt; tools are the offered tools' JSON, kwargs the template
	// variables such as enable_thinking.
	RenderChat(messages []map[string]any, tools []json.RawMessage, kwargs map[string]any) (string, error)
	// Generate runs in, calling emit with each piece of text as it is decoded (stop strings removed); an
	// error from emit stops generation and is returned. The context cancels generation.
	Generate(ctx context.Context, in GenerateInput, emit func(text string) error) (GenerateStats, error)
	// Embed returns one vector per input (L2-normalized) and the number of input tokens.
	Embed(ctx context.Context, inputs []string, truncate bool) ([][]float32, int, error)
}

// GenerateInput is one generation: a chat, or a prompt used verbatim when Messages is empty.
type GenerateInput struct {
	// Messages are rendered with the model's chat template; the oldest (not system) ones are dropped when
	// the conversation does not fit in num_ctx.
	Messages []map[string]any
	Tools    []json.RawMessage
	Kwargs   map[string]any
	Prompt   string
	Options  api.Options
	// Images are the images the rendered prompt's image placeholders stand for, in order (decoded,
	// with their pixels' hash); the oldest go with the messages truncation drops.
	Images []vision.Image

	// NoTruncate makes a prompt over num_ctx an error instead of dropping old messages and tokens; NoShift
	// ends generation when the context is full instead of shifting it (Ollama's truncate and shift false).
	NoTruncate, NoShift bool
	// Format constrains the answer to JSON (structured outputs); nil: free text.
	Format *runner.Format
	// EndTokens end generation as the end-of-sequence tokens do (runner.Request.EndTokens): the chat
	// template's turn markers.
	EndTokens []string
	// SpecialTokens passes special tokens' text on (runner.Request.SpecialTokens): the harmony format's
	// markers, which its parser reads.
	SpecialTokens bool
	// Logprobs asks for the generated tokens' log-probabilities with TopLogprobs alternatives: OnLogprobs
	// receives them just before emit is given the text they complete.
	Logprobs    bool
	TopLogprobs int
	OnLogprobs  func([]api.Logprob)
	// Context are token ids placed before the prompt (an earlier reply's GenerateStats.Context);
	// WantContext fills GenerateStats.Context.
	Context     []int
	WantContext bool
	// OnPrompt, when set, is told how the prompt fits the context before any of it is computed
	// (runner.Request.OnPrompt): the response's headers say so.
	OnPrompt func(runner.PromptFit)
}

// LoadedInfo describes a loaded model.
type LoadedInfo struct {
	ContextLength int    // the num_ctx it was loaded with
	ContextReason string // why: sized from memory, the model's maximum, or the num_ctx asked
	// Used is what its latest finished request held (nil before one).
	Used         *ContextUse
	ChatTemplate string // the template's source ("" when the checkpoint has none)
	// FIM holds the fill-in-the-middle tokens (prefix, suffix, middle) when the tokenizer has them, for suffix.
	FIM  [3]string
	Size int64 // bytes resident, as Ollama's ps reports them: weights and the KV cache at ContextLength
	// Peak is the predicted peak memory (Size plus activations and scratch), what the scheduler budgets;
	// 0: Size.
	Peak int64
	// GPUSize is the part of Size in GPU-visible memory (all of it with Metal's unified memory; 0 on the CPU).
	GPUSize int64
	KVSpec  string // the KV cache layout, as mlxg ps prints it
	// Draft is the name of the draft model loaded with it ("": none).
	Draft string
	// Batch is the model's continuous batch (nil when it runs requests side by side).
	Batch *runner.BatchStats
	// Ranks are the machines a model split over several holds its layers on (nil: one process).
	Ranks []model.RankInfo
	// Stream is the weight residency of a model loaded in streaming mode (nil: all mapped),
	// Weights the bytes of all its weights.
	Stream  *residency.Stats
	Weights int64
	// Layers and KeptLayers: a dense model's decoder layers streamed, and how many of
	// them the budget keeps in memory (0, 0 for experts).
	Layers, KeptLayers int
	// Vision is the memory of the vision tower the model runs (nil: it reads text only).
	Vision *model.VisionMemory
}

// ContextUse is what one request held of a model's context: the tokens in its KV cache at the end
// (prompt and reply), their bytes, the prompt tokens the prefix cache restored instead of computing,
// and the prompt tokens (or messages) cut to fit.
type ContextUse struct {
	Tokens, Restored, Truncated, MessagesDropped int
	KVBytes                                      int64
}

// GenerateStats are a generation's counts and durations.
type GenerateStats struct {
	PromptTokens       int
	PromptEvalDuration time.Duration
	EvalTokens         int
	EvalDuration       time.Duration
	DoneReason         string // "stop" (EOS or a stop string) or "length" (num_predict or the context)
	StopSequence       string // the stop string that ended generation, "" when none did
	// Speculative decoding: tokens drafted and kept (NumDraft: the request's num_draft, 0 off).
	NumDraft, DraftTokens, DraftAccepted int
	// Perf holds extra PERF log keys (KV cache hits, pressure...), printed in order.
	Perf []any
	// Context (with GenerateInput.WantContext) is the conversation as token ids, for a next request's context.
	Context []int
	// Truncated prompt tokens and MessagesDropped chat messages were cut to fit the context (never
	// with NoTruncate, which refuses such a prompt instead).
	Truncated, MessagesDropped int
}
