package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/sched"
	"github.com/mlxg/mlxg/text/constrain"
	"github.com/mlxg/mlxg/text/parser"
	"github.com/mlxg/mlxg/vision"
)

// job is one generation request, from Ollama's or OpenAI's API, in one form.
type job struct {
	// Ollama's "truncate": false (a prompt over num_ctx is an error) and "shift": false (generation ends
	// when the context is full instead of shifting it).
	noTruncate, noShift bool

	name  string // the model as the client named it
	lm    *registry.LocalModel
	draft *registry.LocalModel // the model's draft model (draftFor); nil: none
	// draftByDefault: the draft is the server's default, not the model's own choice: a draft whose
	// tokenizer does not match is left out (with a warning) instead of failing the request.
	draftByDefault bool
	info           *registry.ModelInfo
	opts           api.Options
	keepAlive      *time.Duration

	chat     bool
	messages []api.Message
	tools    api.Tools
	prompt   string // generate
	system   string
	suffix   string
	raw      bool
	think    *api.ThinkValue
	start    time.Time
	format   *constrain.Schema // structured output (format); nil: free text
	// forceTool is the tool_choice that forces a tool call (required, or a named function); nil: the
	// model chooses.
	forceTool *toolChoice

	// logprobs asks for log-probabilities with topLogprobs alternatives: events carry them.
	logprobs    bool
	topLogprobs int
	context     []int           // generate: token ids before the prompt
	images      []api.ImageData // generate: the prompt's images
	wantContext bool            // generate: the outcome's Context
}

// event is what one piece of output yields after parsing.
type event struct {
	content, thinking string
	calls             []api.ToolCall
	logprobs          []api.Logprob // of the tokens this piece completes (an event may carry only these)
}

func (e event) empty() bool { return e.content == "" && e.thinking == "" && len(e.calls) == 0 }

// outcome is a finished generation.
type outcome struct {
	GenerateStats
	load  time.Duration // loading the model for this request (0 when it was loaded)
	ready time.Duration // from the request to its model ready: Ollama's load_duration, never 0
	total time.Duration
	calls int
}

func (o *outcome) metrics() api.Metrics {
	return api.Metrics{TotalDuration: o.total, LoadDuration: o.ready, PromptEvalCount: o.PromptTokens,
		PromptEvalDuration: o.PromptEvalDuration, EvalCount: o.EvalTokens, EvalDuration: o.EvalDuration,
		DraftCount: o.DraftTokens, DraftAcceptedCount: o.DraftAccepted}
}

// newJob resolves the model and checks what can be checked before loading it.
func (s *Server) newJob(model string, options map[string]any, keepAlive *api.Duration, format json.RawMessage) (*job, error) {
	j := &job{name: model, start: time.Now()}
	lm, err := s.resolve(model)
	if err != nil {
		return nil, err
	}
	j.lm = lm
	if j.info, err = registry.ReadInfo(lm.Dir); err != nil {
		return nil, err
	}
	if j.format, err = constrain.FromFormat(format); err != nil {
		return nil, errorf(http.StatusBadRequest, "%v", err)
	}
	j.opts = api.DefaultOptions()
	j.opts.NumCtx = s.cfg.ContextLength
	j.opts.NumDraft = s.cfg.numDraft()
	generationDefaults(&j.opts, j.info.Generation)
	if err := modelOptions(&j.opts, lm); err != nil { // a Modelfile's PARAMETER lines (modelfile.go)
		return nil, err
	}
	if j.draft, j.draftByDefault, err = s.draftFor(lm); err != nil {
		return nil, err
	}
	if err := j.opts.FromMap(options); err != nil {
		var unknown *api.UnknownOptionError
		if !errors.As(err, &unknown) || strings.Contains(err.Error(), "must be") {
			return nil, errorf(http.StatusBadRequest, "%v", err)
		}
		s.log.Warn("invalid option provided", "error", err) // as Ollama: unknown options are ignored
	}
	if err := checkNumCtx(options, j.opts.NumCtx); err != nil {
		return nil, err
	}
	ro := toRunnerOptions(j.opts)
	if ro.NumCtx == 0 {
		ro.NumCtx = 1 // sized from memory at load (kvstore's auto context); nothing to check yet
	}
	if err := ro.Validate(); err != nil {
		return nil, errorf(http.StatusBadRequest, "%v", err)
	}
	if keepAlive != nil {
		d := keepAlive.Duration
		if d == time.Duration(1<<63-1) {
			d = -1
		}
		j.keepAlive = &d
	}
	return j, nil
}

// checkNumCtx refuses a num_ctx that no context can honour: 0 or negative, from the request's options
// or a Modelfile's PARAMETER (0 is what the server passes on for "sized from memory", so a client's
// 0 is refused rather than read as that: leaving the option out asks for it). A num_ctx above the
// model's maximum is not an error: the load clamps it to the maximum (and to what memory holds), logs
// it, and /api/ps and /api/show say so; the KV cache is paged, so nothing is allocated for it.
func checkNumCtx(options map[string]any, n int) error {
	if _, asked := options["num_ctx"]; (asked && n <= 0) || n < 0 {
		return errorf(http.StatusBadRequest, "num_ctx is %d: it must be a positive number of tokens; leave it out to have the context sized from memory (up to the model's maximum)", n)
	}
	return nil
}

// generationDefaults applies the sampling settings of the checkpoint's generation_config.json (what
// /api/show lists as parameters), as an Ollama model's parameters are applied before the request's options.
func generationDefaults(o *api.Options, g map[string]any) {
	num := func(k string) (float64, bool) {
		f, ok := g[k].(float64)
		return f, ok && f >= 0
	}
	if f, ok := num("temperature"); ok {
		o.Temperature = float32(f)
	}
	if f, ok := num("top_k"); ok {
		o.TopK = int(f)
	}
	if f, ok := num("top_p"); ok {
		o.TopP = float32(f)
	}
	if f, ok := num("min_p"); ok {
		o.MinP = float32(f)
	}
	if f, ok := num("repetition_penalty"); ok && f > 0 {
		o.RepeatPenalty = float32(f)
	}
}

// schedRequest is the scheduler's view of the job's model. The scheduler asks for the size only when
// the model must be loaded (EstimateFreeing, with the memory of the idle models it would unload for
// it counted as available), and then loads it: both go by the plan that fitted.
func (s *Server) schedRequest(j *job) (sched.Request, error) {
	lm, numCtx, det := j.lm, j.opts.NumCtx, details(j.info)
	var plan *LoadPlan
	fingerprint, planLoad := strconv.Itoa(numCtx), s.cfg.Loader.Plan
	if draft := j.draft; draft != nil {
		dl, ok := s.cfg.Loader.(DraftLoader)
		if !ok {
			return sched.Request{}, errorf(http.StatusBadRequest, "model %s has a draft model (%s), which this server cannot load", lm.Name, draft.Name)
		}
		// Another draft is another load: the scheduler reloads the model when it changes.
		fingerprint += " draft " + draft.Dir
		planLoad = func(m *registry.LocalModel, numCtx int, freed int64) (*LoadPlan, error) {
			p, err := dl.PlanDraft(m, draft, numCtx, freed)
			if p != nil {
				p.DraftOptional = j.draftByDefault
			}
			return p, err
		}
	}
	return sched.Request{Key: lm.Dir, Name: lm.Name, Fingerprint: fingerprint,
		EstimateFreeing: func(freed int64) (int64, error) {
			p, err := planLoad(lm, numCtx, freed)
			if err != nil {
				return 0, err
			}
			plan = p
			return p.Peak, nil
		},
		KeepAlive: j.keepAlive, Load: func(ctx context.Context) (sched.Model, error) {
			if plan == nil { // a scheduler that loads without asking the size first
				p, err := planLoad(lm, numCtx, 0)
				if err != nil {
					return nil, err
				}
				plan = p
			}
			m, err := s.cfg.Loader.Load(ctx, plan)
			if err != nil {
				return nil, err
			}
			return &loaded{Model: m, lm: lm, details: det}, nil
		}}, nil
}

// acquire loads the model (or finds it loaded) and holds a slot on it.
func (s *Server) acquire(ctx context.Context, j *job) (*sched.Lease, *loaded, error) {
	req, err := s.schedRequest(j)
	if err != nil {
		return nil, nil, err
	}
	lease, err := s.sched.Acquire(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	return lease, lease.Model.(*loaded), nil
}

// loadOnly handles a request without a prompt: it loads the model, or with keep_alive 0 unloads it, and
// reports which ("load" or "unload").
func (s *Server) loadOnly(ctx context.Context, j *job) (string, error) {
	if j.keepAlive != nil && *j.keepAlive == 0 {
		s.sched.Unload(j.lm.Dir)
		return "unload", nil
	}
	lease, _, err := s.acquire(ctx, j)
	if err != nil {
		return "", err
	}
	lease.Release()
	return "load", nil
}

// functionTool is tools[i] of an Anthropic or OpenAI Responses request: a function's name, description and
// JSON schema, which those APIs give side by side; field names the schema's field in errors. No schema
// stands for a function without parameters.
func functionTool(i int, name, description string, schema json.RawMessage, field string) (api.Tool, error) {
	if name == "" {
		return api.Tool{}, errorf(http.StatusBadRequest, "tools[%d]: name is required", i)
	}
	schema = bytes.TrimSpace(schema)
	if len(schema) == 0 || string(schema) == "null" {
		schema = []byte(`{"type":"object","properties":{}}`)
	} else if schema[0] != '{' {
		return api.Tool{}, errorf(http.StatusBadRequest, "tools[%d].%s must be a JSON schema object", i, field)
	}
	nameJSON, _ := json.Marshal(name)
	fn := append([]byte(`{"name":`), nameJSON...)
	if description != "" {
		desc, _ := json.Marshal(description)
		fn = append(append(fn, `,"description":`...), desc...)
	}
	fn = append(append(append(fn, `,"parameters":`...), schema...), '}')
	var f api.ToolFunction
	if err := json.Unmarshal(fn, &f); err != nil {
		return api.Tool{}, errorf(http.StatusBadRequest, "tools[%d].%s: %v", i, field, err)
	}
	return toolFromFunction(i, fn)
}

// toolFromFunction is the function tool of fn, a function's JSON (already checked), which the tool keeps
// as the client sent it (Tool.Raw) so that the chat template gets the schema's key order and number kinds.
func toolFromFunction(i int, fn []byte) (api.Tool, error) {
	raw := append(append([]byte(`{"type":"function","function":`), fn...), '}')
	var t api.Tool
	if err := json.Unmarshal(raw, &t); err != nil {
		return api.Tool{}, errorf(http.StatusBadRequest, "tools[%d]: %v", i, err)
	}
	return t, nil
}

// toolsJSON gives the tools to the chat template as JSON, keys in the client's order.
func toolsJSON(tools api.Tools) ([]json.RawMessage, []string, error) {
	var out []json.RawMessage
	var names []string
	for _, t := range tools {
		b := t.Raw() // as the client sent it
		if b == nil {
			var err error
			if b, err = json.Marshal(t); err != nil {
				return nil, nil, err
			}
		}
		out = append(out, b)
		names = append(names, t.Function.Name)
	}
	return out, names, nil
}

// templateMessages converts chat messages to what HF chat templates read: tool_calls with arguments
// objects, reasoning_content for earlier thinking, name for a tool result's tool.
func templateMessages(msgs []api.Message) []map[string]any {
	out := make([]map[string]any, 0, len(msgs))
	for _, m := range msgs {
		tm := map[string]any{"role": m.Role, "content": m.Content}
		if len(m.Images) > 0 {
			tm["content"] = contentParts(m)
		}
		if m.Thinking != "" {
			tm["reasoning_content"] = m.Thinking
		}
		if len(m.ToolCalls) > 0 {
			var calls []any
			for _, c := range m.ToolCalls {
				args, _ := c.Function.Arguments.MarshalJSON()
				calls = append(calls, map[string]any{"type": "function", "id": c.ID,
					"function": map[string]any{"name": c.Function.Name, "arguments": json.RawMessage(args)}})
			}
			tm["tool_calls"] = calls
		}
		if m.ToolName != "" {
			tm["name"] = m.ToolName
		}
		if m.ToolCallID != "" {
			tm["tool_call_id"] = m.ToolCallID
		}
		out = append(out, tm)
	}
	return out
}

// contentParts is a message with images as the chat templates of vision models read it: a list of
// {"type":"image"} and {"type":"text","text":…} parts in the order the client gave them (Ollama's
// images, which carry no place, before the text).
func contentParts(m api.Message) []any {
	var parts []any
	text := func(s string) {
		if s != "" {
			parts = append(parts, map[string]any{"type": "text", "text": s})
		}
	}
	done := 0
	for k := range m.Images {
		if k < len(m.ImageAt) {
			at := min(max(m.ImageAt[k], done), len(m.Content))
			text(m.Content[done:at])
			done = at
		}
		parts = append(parts, map[string]any{"type": "image"})
	}
	text(m.Content[done:])
	return parts
}

// run generates for j on a loaded model, passing each parsed event to sink.
func (s *Server) run(ctx context.Context, j *job, sink func(event) error) (*outcome, error) {
	j.useModelfile() // the model's own system prompt and messages (modelfile.go)
	caps := parser.Detect(j.info.ChatTemplate)
	thinkOn := false
	switch {
	case j.think != nil && j.think.Bool() && !caps.Thinking:
		return nil, errorf(http.StatusBadRequest, "%q does not support thinking", j.name)
	case j.think != nil:
		thinkOn = j.think.Bool()
	default:
		thinkOn = caps.Thinking // as Ollama: thinking models think unless told not to
	}
	if len(j.tools) > 0 && caps.Tools == parser.ToolsNone {
		return nil, errorf(http.StatusBadRequest, "%q does not support tools", j.name)
	}
	tools, names, err := toolsJSON(j.tools)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "tools: %v", err)
	}
	if j.raw && (j.system != "" || j.suffix != "" || len(j.context) > 0) {
		return nil, errorf(http.StatusBadRequest, "raw mode does not support template, system, or context")
	}

	var images []vision.Image
	if j.chat {
		images, err = requestImages(j.name, s.visionModel(j), j.messages, messageField)
	} else {
		images, err = requestImages(j.name, s.visionModel(j), []api.Message{{Images: j.images}}, func(int) string { return "images" })
		if err == nil && len(images) > 0 && (j.raw || j.suffix != "" || j.info.ChatTemplate == "") {
			err = errorf(http.StatusBadRequest, "images need the model's chat template, which places them: remove raw or suffix")
		}
	}
	if err != nil {
		return nil, err
	}

	lease, m, err := s.acquire(ctx, j)
	if err != nil {
		return nil, err
	}
	defer lease.Release()
	info := m.Info()

	in := GenerateInput{Options: j.opts, Context: j.context, WantContext: j.wantContext, Images: images}
	in.Options.NumPredict = boundNumPredict(j.opts.NumPredict, info.ContextLength)
	in.EndTokens = turnMarkers(info.ChatTemplate)
	if caps.Harmony {
		// gpt-oss: <|end|> closes one message of a reply that goes on (analysis, then final), <|return|>
		// and <|call|> end it; the markers are special tokens its parser reads.
		in.EndTokens, in.SpecialTokens = []string{"<|return|>", "<|call|>"}, !j.raw
	}
	if caps.SpecialTags && !j.raw {
		in.SpecialTokens = true // Mistral's [TOOL_CALLS], [ARGS] and [THINK], Gemma 4's channel and call tags: special tokens their parsers read
	}
	var pendingLP []api.Logprob // of text the parser has not yielded yet
	if j.logprobs {
		in.Logprobs, in.TopLogprobs = true, j.topLogprobs
		in.OnLogprobs = func(lps []api.Logprob) { pendingLP = append(pendingLP, lps...) }
	}
	kwargs := map[string]any{}
	if j.think != nil && caps.Thinking {
		kwargs["enable_thinking"] = thinkOn
		if level, ok := j.think.Value.(string); ok {
			kwargs["reasoning_effort"] = level // think "low"/"medium"/"high", for templates that read it (as Ollama)
		}
	}
	in.NoTruncate, in.NoShift = j.noTruncate, j.noShift
	in.OnPrompt = func(fit runner.PromptFit) { s.promptFit(ctx, j, fit) }
	switch {
	case j.chat:
		in.Messages, in.Tools, in.Kwargs = templateMessages(j.messages), tools, kwargs
	case j.raw:
		in.Prompt = j.prompt
	case j.suffix != "":
		if info.FIM[0] == "" {
			return nil, errorf(http.StatusBadRequest, "%q does not support insert (suffix): its tokenizer has no fill-in-the-middle tokens (%s); remove \"suffix\" or use a code model such as qwen2.5-coder", j.name, fimList())
		}
		in.Prompt = info.FIM[0] + j.prompt + info.FIM[1] + j.suffix + info.FIM[2]
	case info.ChatTemplate == "":
		in.Prompt = j.prompt
		if j.system != "" {
			in.Prompt = j.system + "\n\n" + j.prompt
		}
	default:
		var msgs []api.Message
		if j.system != "" {
			msgs = append(msgs, api.Message{Role: "system", Content: j.system})
		}
		msgs = append(msgs, j.modelMessages()...)
		in.Messages, in.Kwargs = templateMessages(append(msgs, api.Message{Role: "user", Content: j.prompt, Images: j.images})), kwargs
	}

	if caps.Tools == parser.ToolsMistral {
		parser.MistralCallIDs(in.Messages) // its templates require ids of nine letters and digits
	}
	thinkOpen, thinkClose := caps.ThinkTags()
	pcfg := parser.Config{Thinking: thinkOn && caps.Thinking && !j.raw, Harmony: caps.Harmony && !j.raw,
		ThinkOpen: thinkOpen, ThinkClose: thinkClose, Gemma4: caps.Gemma4 && !j.raw}
	if len(in.Messages) > 0 && pcfg.Thinking && !pcfg.Harmony {
		if p, err := m.RenderChat(in.Messages, in.Tools, in.Kwargs); err == nil {
			pcfg.InThinking = parser.PromptOpens(p, thinkOpen)
		} else {
			return nil, errorf(http.StatusBadRequest, "rendering the chat template: %v", err)
		}
	}
	if len(tools) > 0 {
		pcfg.Tools, pcfg.ToolNames, pcfg.ToolTypes = caps.Tools, names, parser.ParamTypes(tools)
	}
	switch {
	case j.forceTool != nil && len(tools) > 0:
		// A forced tool call is the answer, whatever format asks for (toolchoice.go).
		if in.Format, err = toolCallFormat(j.tools, *j.forceTool, caps.Tools); err != nil {
			return nil, err
		}
	case j.format != nil:
		in.Format = &runner.Format{Schema: j.format}
	}
	if in.Format != nil && pcfg.Harmony {
		harmonyFormat(in.Format)
	}
	if in.Format != nil && pcfg.Thinking && !pcfg.Harmony {
		// The constraint applies to the answer, after the thinking block (as Ollama does).
		in.Format.ThinkOpen, in.Format.ThinkClose, in.Format.InThinking = thinkOpen, thinkClose, pcfg.InThinking
	}
	p := parser.New(pcfg)
	out := &outcome{load: lease.LoadDuration, ready: time.Since(j.start)}
	forward := func(r parser.Result) error {
		ev := event{content: r.Content, thinking: r.Thinking}
		for _, c := range r.Calls {
			var args api.ToolCallFunctionArguments
			_ = args.UnmarshalJSON(c.Arguments)
			ev.calls = append(ev.calls, api.ToolCall{ID: "call_" + randomID(8),
				Function: api.ToolCallFunction{Index: out.calls, Name: c.Name, Arguments: args}})
			out.calls++
		}
		ev.logprobs, pendingLP = pendingLP, nil
		if ev.empty() && len(ev.logprobs) == 0 {
			return nil
		}
		return sink(ev)
	}
	stats, err := m.Generate(ctx, in, func(text string) error { return forward(p.Add(text, false)) })
	if err == nil {
		err = forward(p.Add("", true))
	}
	out.GenerateStats = stats
	out.total = time.Since(j.start)
	s.perf(j, out, err)
	if err != nil {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		var ae *apiError
		if !errors.As(err, &ae) && !contextOverflow(err) && isOptionError(err) {
			err = errorf(http.StatusBadRequest, "%v", err)
		}
		return out, err
	}
	return out, nil
}

// responseHeaderKey is the request context's key for the response's headers (server.go's limitBody
// puts them there), which a generation fills before its first byte goes out.
type responseHeaderKey struct{}

// Headers that say how a prompt fit the context (docs/api.md, "Context length"): on every generation
// response, and the cut ones only when something was cut.
const (
	headerNumCtx          = "X-Mlxg-Num-Ctx"
	headerPromptTokens    = "X-Mlxg-Prompt-Tokens"
	headerPromptTruncated = "X-Mlxg-Prompt-Truncated"
	headerMessagesDropped = "X-Mlxg-Messages-Dropped"
)

// promptFit says how j's prompt fits the context: in the response's headers, and in the log when it
// was cut (the PERF line says it too).
func (s *Server) promptFit(ctx context.Context, j *job, fit runner.PromptFit) {
	if h, ok := ctx.Value(responseHeaderKey{}).(http.Header); ok {
		h.Set(headerNumCtx, strconv.Itoa(fit.NumCtx))
		h.Set(headerPromptTokens, strconv.Itoa(fit.Tokens))
		if fit.Truncated > 0 {
			h.Set(headerPromptTruncated, strconv.Itoa(fit.Truncated))
		}
		if fit.MessagesDropped > 0 {
			h.Set(headerMessagesDropped, strconv.Itoa(fit.MessagesDropped))
		}
	}
	if fit.Truncated > 0 || fit.MessagesDropped > 0 {
		s.log.Warn("the prompt did not fit the context: its oldest part was cut (send truncate false for an error instead)", "model", j.name,
			"num_ctx", fit.NumCtx, "prompt_tokens", fit.Tokens, "tokens_cut", fit.Truncated, "messages_dropped", fit.MessagesDropped)
	}
}

// turnMarkerSets are the turn markers of the chat-template families Ollama knows, which its templates
// list as stop words: ChatML (Qwen), Llama 3, Gemma, Phi-3 and Command R; and Gemma 4's.
var turnMarkerSets = [][]string{
	{"<|im_start|>", "<|im_end|>"},
	{"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
	{"<start_of_turn>", "<end_of_turn>"},
	{"<|end|>", "<|system|>", "<|user|>", "<|assistant|>"},
	{"<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>"},
	{"<|turn>", "<turn|>"}, // Gemma 4
}

// turnMarkers are the turn markers a chat template writes, which end a generation as its end-of-sequence
// token does (runner.Request.EndTokens), as Ollama stops on them: a model that opens a new turn
// ("<|im_start|>assistant\n<think>…", which a client would otherwise see as the reply's text, its
// marker being a special token that decodes to nothing) has ended its own.
func turnMarkers(chatTemplate string) []string {
	var out []string
	for _, set := range turnMarkerSets {
		for _, m := range set {
			if strings.Contains(chatTemplate, m) {
				out = append(out, m)
			}
		}
	}
	return out
}

// openEndedContexts bounds a generation that has no limit (num_predict -1, max_tokens or
// max_output_tokens unset) at this many context windows of tokens, as Ollama bounds it: a model that
// never stops (a loop, a small model) ends with done_reason "length" instead of generating for ever as
// the context shifts. A larger num_predict is cut to the same bound.
const openEndedContexts = 10

// boundNumPredict is the num_predict a generation runs with in a numCtx-token context: n, bounded as
// openEndedContexts says; -2 (fill the context, then stop) is bounded already.
func boundNumPredict(n, numCtx int) int {
	if numCtx <= 0 || n == -2 {
		return n
	}
	if limit := openEndedContexts * numCtx; n < 0 || n > limit {
		return limit
	}
	return n
}

// isOptionError reports errors the engine returns for bad request input rather than failures.
func isOptionError(err error) bool {
	msg := err.Error()
	return contextOverflow(err) || strings.Contains(msg, "chat template") || strings.Contains(msg, "prompt is empty") ||
		strings.Contains(msg, "raise_exception")
}

// perf logs the request's PERF line.
func (s *Server) perf(j *job, o *outcome, err error) {
	observeRequest(j.name, o, err) // Prometheus (metrics_server.go)
	rate := func(n int, d time.Duration) string {
		if d <= 0 {
			return "0"
		}
		return strconv.FormatFloat(float64(n)/d.Seconds(), 'f', 1, 64)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "PERF: model=%s prompt_tok=%d gen_tok=%d prefill_s=%.3f prompt_tps=%s gen_tps=%s decode_s=%.3f load_s=%.3f total_s=%.3f",
		j.name, o.PromptTokens, o.EvalTokens, o.PromptEvalDuration.Seconds(),
		rate(o.PromptTokens, o.PromptEvalDuration), rate(o.EvalTokens, o.EvalDuration), o.EvalDuration.Seconds(),
		o.load.Seconds(), o.total.Seconds())
	if o.NumDraft > 0 {
		fmt.Fprintf(&b, " draft_tok=%d draft_acc=%d draft_rate=%s", o.DraftTokens, o.DraftAccepted, acceptance(o.DraftTokens, o.DraftAccepted))
	}
	for i := 0; i+1 < len(o.Perf); i += 2 {
		fmt.Fprintf(&b, " %v=%v", o.Perf[i], o.Perf[i+1])
	}
	switch {
	case errors.Is(err, context.Canceled):
		b.WriteString(" done=cancelled")
	case err != nil:
		b.WriteString(" done=error")
	default:
		b.WriteString(" done=" + o.DoneReason)
	}
	s.log.Info(b.String())
	s.status.record(j.name, o, err, b.String()) // for /api/status (status.go)
}

// acceptance is the share of drafted tokens kept, as the PERF line prints it.
func acceptance(drafted, kept int) string {
	if drafted == 0 {
		return "0"
	}
	return strconv.FormatFloat(float64(kept)/float64(drafted), 'f', 3, 64)
}

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ndjson streams JSON lines, flushing each; after the first write, errors go in the stream.
type ndjson struct {
	c       *gin.Context
	mu      sync.Mutex
	started bool
}

func newNDJSON(c *gin.Context) *ndjson { return &ndjson{c: c} }

func (n *ndjson) send(v any) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if !n.started {
		n.c.Header("Content-Type", "application/x-ndjson")
		n.c.Status(http.StatusOK)
		n.started = true
	}
	if _, err := n.c.Writer.Write(append(b, '\n')); err != nil {
		return err
	}
	n.c.Writer.Flush()
	return n.c.Request.Context().Err()
}

// fail reports err: as the HTTP status when nothing was sent yet, else as an {"error": …} line.
func (n *ndjson) fail(err error) {
	status, msg := statusOf(err)
	if status == 499 {
		return // the client is gone
	}
	if n.started {
		noteError(n.c, status, msg)
		_ = n.send(gin.H{"error": msg})
		return
	}
	abortErr(n.c, err)
}

func (s *Server) handleGenerate(c *gin.Context) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	var req api.GenerateRequest
	j, err := s.ollamaJob(c, &req, func() ollamaFields {
		return ollamaFields{model: req.Model, options: req.Options, keepAlive: req.KeepAlive, format: req.Format,
			truncate: req.Truncate, shift: req.Shift, logprobs: req.Logprobs, topLogprobs: req.TopLogprobs}
	}, func() error {
		switch {
		case req.Raw && req.Template != "":
			return errorf(http.StatusBadRequest, "raw mode does not support template, system, or context")
		case req.Template != "":
			return errorf(http.StatusBadRequest, "template overrides are not supported: mlxg renders the model's own chat template")
		}
		return nil
	})
	if err != nil {
		abortErr(c, err)
		return
	}
	j.prompt, j.system, j.suffix, j.raw, j.think = req.Prompt, req.System, req.Suffix, req.Raw, req.Think
	j.context, j.wantContext = req.Context, !req.Raw
	j.images = req.Images
	var idle func(reason string) api.GenerateResponse
	if req.Prompt == "" && req.Suffix == "" {
		idle = func(reason string) api.GenerateResponse {
			return api.GenerateResponse{Model: req.Model, CreatedAt: time.Now().UTC(), Done: true, DoneReason: reason}
		}
	}
	respond(s, c, j, req.Stream == nil || *req.Stream, idle,
		func(e event) api.GenerateResponse {
			return api.GenerateResponse{Model: req.Model, CreatedAt: time.Now().UTC(), Response: e.content,
				Thinking: e.thinking, ToolCalls: e.calls, Logprobs: e.logprobs}
		},
		func(o *outcome, whole event) api.GenerateResponse {
			return api.GenerateResponse{Model: req.Model, CreatedAt: time.Now().UTC(), Response: whole.content,
				Thinking: whole.thinking, ToolCalls: whole.calls, Done: true, DoneReason: o.DoneReason, Metrics: o.metrics(),
				Context: o.Context, Logprobs: whole.logprobs}
		})
}

// ollamaFields are the request fields /api/generate and /api/chat share.
type ollamaFields struct {
	model           string
	options         map[string]any
	keepAlive       *api.Duration
	format          json.RawMessage
	truncate, shift *bool
	logprobs        bool
	topLogprobs     int
}

// ollamaJob reads an /api/generate or /api/chat body into req and makes its job from the fields both
// have (fields reads them from req). check holds the request's own 400s that need no model; they come
// after the body's and top_logprobs' and before the model is resolved, so a bad request is refused
// before a missing model is reported.
func (s *Server) ollamaJob(c *gin.Context, req any, fields func() ollamaFields, check func() error) (*job, error) {
	if err := decode(c, req); err != nil {
		return nil, err
	}
	f := fields()
	if err := checkTopLogprobs(f.topLogprobs); err != nil {
		return nil, err
	}
	if err := check(); err != nil {
		return nil, err
	}
	j, err := s.newJob(f.model, f.options, f.keepAlive, f.format)
	if err != nil {
		return nil, err
	}
	j.noTruncate, j.noShift = isFalse(f.truncate), isFalse(f.shift)
	j.logprobs, j.topLogprobs = f.logprobs, f.topLogprobs
	return j, nil
}

// respond runs j and answers as Ollama does: NDJSON pieces shaped by chunk and then
// final when streaming, else one JSON object made by final from the whole reply (whole
// is empty when streaming: its pieces have been sent). With idle set the request has
// nothing to generate: it loads the model (or with keep_alive 0 unloads it) and idle
// makes the one answer.
func respond[T any](s *Server, c *gin.Context, j *job, stream bool, idle func(reason string) T, chunk func(event) T, final func(o *outcome, whole event) T) {
	if idle != nil {
		reason, err := s.loadOnly(c.Request.Context(), j)
		if err != nil {
			abortErr(c, err)
			return
		}
		c.JSON(http.StatusOK, idle(reason))
		return
	}
	nd := newNDJSON(c)
	if !stream {
		o, whole, err := s.runWhole(c.Request.Context(), j)
		if err != nil {
			nd.fail(err)
			return
		}
		c.JSON(http.StatusOK, final(o, whole))
		return
	}
	o, err := s.run(c.Request.Context(), j, func(e event) error { return nd.send(chunk(e)) })
	if err != nil {
		nd.fail(err)
		return
	}
	_ = nd.send(final(o, event{}))
}

// runWhole runs j for a request that does not stream: its events make one, the whole reply.
func (s *Server) runWhole(ctx context.Context, j *job) (*outcome, event, error) {
	var text, thinking strings.Builder
	var whole event
	o, err := s.run(ctx, j, func(e event) error {
		text.WriteString(e.content)
		thinking.WriteString(e.thinking)
		whole.calls = append(whole.calls, e.calls...)
		whole.logprobs = append(whole.logprobs, e.logprobs...)
		return nil
	})
	whole.content, whole.thinking = text.String(), thinking.String()
	return o, whole, err
}

func (s *Server) handleChat(c *gin.Context) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	var req api.ChatRequest
	j, err := s.ollamaJob(c, &req, func() ollamaFields {
		return ollamaFields{model: req.Model, options: req.Options, keepAlive: req.KeepAlive, format: req.Format,
			truncate: req.Truncate, shift: req.Shift, logprobs: req.Logprobs, topLogprobs: req.TopLogprobs}
	}, func() error {
		for i, m := range req.Messages {
			switch m.Role {
			case "system", "user", "assistant", "tool":
			default:
				return errorf(http.StatusBadRequest, "messages[%d]: unknown role %q (use system, user, assistant or tool)", i, m.Role)
			}
		}
		return nil
	})
	if err != nil {
		abortErr(c, err)
		return
	}
	j.chat, j.messages, j.tools, j.think = true, req.Messages, req.Tools, req.Think
	var idle func(reason string) api.ChatResponse
	if len(req.Messages) == 0 {
		idle = func(reason string) api.ChatResponse {
			return api.ChatResponse{Model: req.Model, CreatedAt: time.Now().UTC(),
				Message: api.Message{Role: "assistant"}, Done: true, DoneReason: reason}
		}
	}
	reply := func(e event) api.Message {
		return api.Message{Role: "assistant", Content: e.content, Thinking: e.thinking, ToolCalls: e.calls}
	}
	respond(s, c, j, req.Stream == nil || *req.Stream, idle,
		func(e event) api.ChatResponse {
			return api.ChatResponse{Model: req.Model, CreatedAt: time.Now().UTC(), Message: reply(e), Logprobs: e.logprobs}
		},
		func(o *outcome, whole event) api.ChatResponse {
			return api.ChatResponse{Model: req.Model, CreatedAt: time.Now().UTC(), Message: reply(whole),
				Done: true, DoneReason: o.DoneReason, Metrics: o.metrics(), Logprobs: whole.logprobs}
		})
}

// embedInputs reads /api/embed's input: a string or a list of strings.
func embedInputs(v any) ([]string, error) {
	switch x := v.(type) {
	case string:
		return []string{x}, nil
	case []any:
		out := make([]string, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, errorf(http.StatusBadRequest, "invalid input type: input[%d] is not a string", i)
			}
			out[i] = s
		}
		return out, nil
	case nil:
		return nil, nil
	}
	return nil, errorf(http.StatusBadRequest, "invalid input type: input must be a string or a list of strings")
}

// embed computes embeddings for inputs on j's model; it also returns the time from the request to its
// model ready (Ollama's load_duration).
func (s *Server) embed(ctx context.Context, j *job, inputs []string, truncate bool) ([][]float32, int, time.Duration, error) {
	lease, m, err := s.acquire(ctx, j)
	if err != nil {
		return nil, 0, 0, err
	}
	defer lease.Release()
	ready := time.Since(j.start)
	vecs, n, err := m.Embed(ctx, inputs, truncate)
	return vecs, n, ready, err
}

func (s *Server) handleEmbed(c *gin.Context) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	var req api.EmbedRequest
	if err := decode(c, &req); err != nil {
		abortErr(c, err)
		return
	}
	inputs, err := embedInputs(req.Input)
	if err != nil {
		abortErr(c, err)
		return
	}
	j, err := s.newJob(req.Model, req.Options, req.KeepAlive, nil)
	if err != nil {
		abortErr(c, err)
		return
	}
	if len(inputs) == 0 { // no input: load (or with keep_alive 0 unload) the model, as Ollama does
		if _, err := s.loadOnly(c.Request.Context(), j); err != nil {
			abortErr(c, err)
			return
		}
		c.JSON(http.StatusOK, api.EmbedResponse{Model: req.Model, Embeddings: [][]float32{}})
		return
	}
	if req.Dimensions < 0 {
		abort(c, http.StatusBadRequest, "dimensions must be positive")
		return
	}
	vecs, n, load, err := s.embed(c.Request.Context(), j, inputs, req.Truncate == nil || *req.Truncate)
	if err != nil {
		abortErr(c, err)
		return
	}
	if req.Dimensions > 0 {
		for i, v := range vecs {
			vecs[i] = normalize(v[:min(req.Dimensions, len(v))])
		}
	}
	c.JSON(http.StatusOK, api.EmbedResponse{Model: req.Model, Embeddings: vecs, TotalDuration: time.Since(j.start),
		LoadDuration: load, PromptEvalCount: n})
}

func (s *Server) handleEmbeddings(c *gin.Context) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	var req api.EmbeddingRequest
	if err := decode(c, &req); err != nil {
		abortErr(c, err)
		return
	}
	j, err := s.newJob(req.Model, req.Options, req.KeepAlive, nil)
	if err != nil {
		abortErr(c, err)
		return
	}
	if req.Prompt == "" {
		if _, err := s.loadOnly(c.Request.Context(), j); err != nil {
			abortErr(c, err)
			return
		}
		c.JSON(http.StatusOK, api.EmbeddingResponse{Embedding: []float64{}})
		return
	}
	vecs, _, _, err := s.embed(c.Request.Context(), j, []string{req.Prompt}, true)
	if err != nil {
		abortErr(c, err)
		return
	}
	out := make([]float64, len(vecs[0]))
	for i, v := range vecs[0] {
		out[i] = float64(v)
	}
	c.JSON(http.StatusOK, api.EmbeddingResponse{Embedding: out})
}
