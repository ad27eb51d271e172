package server

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/openai"
)

// oaiDecode reads a body, with errors in OpenAI's shape.
func oaiDecode(c *gin.Context, v any) bool {
	if err := decode(c, v); err != nil {
		abortV1(c, err)
		return false
	}
	return true
}

// sse writes Server-Sent Events as OpenAI streams them: "data: {json}\n\n", then "data: [DONE]\n\n".
type sse struct {
	c       *gin.Context
	started bool
}

func (s *sse) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.raw(b)
}

func (s *sse) raw(b []byte) error {
	if !s.started {
		h := s.c.Writer.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
		s.c.Status(http.StatusOK)
		s.started = true
	}
	if _, err := fmt.Fprintf(s.c.Writer, "data: %s\n\n", b); err != nil {
		return err
	}
	s.c.Writer.Flush()
	return s.c.Request.Context().Err()
}

func (s *sse) fail(err error) {
	status, msg := statusOf(err)
	if status == 499 {
		return
	}
	if s.started {
		noteError(s.c, status, msg)
		_ = s.send(openai.NewError(status, msg))
		return
	}
	abortV1(s.c, err)
}

// oaiOptions gathers the sampling fields of an OpenAI request into Ollama's options.
func oaiOptions(maxTokens, maxCompletion, seed, numDraft *int, temperature, topP, freq, pres *float64, stop json.RawMessage) (map[string]any, error) {
	opts := draftOption(numDraft)
	if maxCompletion != nil {
		maxTokens = maxCompletion
	}
	if maxTokens != nil {
		if *maxTokens < 1 {
			return nil, errorf(http.StatusBadRequest, "max_tokens must be at least 1")
		}
		opts["num_predict"] = float64(*maxTokens)
	}
	if seed != nil {
		opts["seed"] = float64(*seed)
	}
	for name, v := range map[string]*float64{"temperature": temperature, "top_p": topP, "frequency_penalty": freq, "presence_penalty": pres} {
		if v != nil {
			opts[name] = *v
		}
	}
	stops, err := openai.Stops(stop)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "%v", err)
	}
	if len(stops) > 0 {
		list := make([]any, len(stops))
		for i, s := range stops {
			list[i] = s
		}
		opts["stop"] = list
	}
	return opts, nil
}

// draftOption starts a request's options with num_draft, which the OpenAI, Responses and
// Anthropic routes take as a field of the request's top level (nil: not given).
func draftOption(numDraft *int) map[string]any {
	opts := map[string]any{}
	if numDraft != nil {
		opts["num_draft"] = float64(*numDraft)
	}
	return opts
}

func checkN(n *int) error {
	if n != nil && *n != 1 {
		return errorf(http.StatusBadRequest, "n = %d is not supported: mlxg returns one choice (n = 1)", *n)
	}
	return nil
}

// oaiMessages converts OpenAI messages to Ollama's; a tool result gets the name of the call it answers.
func oaiMessages(in []openai.Message) ([]api.Message, error) {
	callNames := map[string]string{}
	out := make([]api.Message, 0, len(in))
	for i, m := range in {
		text, images, err := m.TextImages()
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "messages[%d]: %v", i, err)
		}
		role := strings.ToLower(m.Role)
		if role == "developer" {
			role = "system"
		}
		switch role {
		case "system", "user", "assistant", "tool":
		default:
			return nil, errorf(http.StatusBadRequest, "messages[%d]: unknown role %q (use system, developer, user, assistant or tool)", i, m.Role)
		}
		msg := api.Message{Role: role, Content: text, ToolCallID: m.ToolCallID, Thinking: m.ReasoningContent}
		addImages(&msg, images)
		if msg.Thinking == "" {
			msg.Thinking = m.Reasoning
		}
		for k, tc := range m.ToolCalls {
			var args api.ToolCallFunctionArguments
			raw := strings.TrimSpace(tc.Function.Arguments)
			if raw == "" {
				raw = "{}"
			}
			if err := args.UnmarshalJSON([]byte(raw)); err != nil {
				return nil, errorf(http.StatusBadRequest, "messages[%d].tool_calls[%d].function.arguments must be a JSON object in a string: %v", i, k, err)
			}
			msg.ToolCalls = append(msg.ToolCalls, api.ToolCall{ID: tc.ID, Function: api.ToolCallFunction{Index: k, Name: tc.Function.Name, Arguments: args}})
			callNames[tc.ID] = tc.Function.Name
		}
		if role == "tool" {
			msg.ToolName = m.Name
			if msg.ToolName == "" {
				msg.ToolName = callNames[m.ToolCallID]
			}
		}
		out = append(out, msg)
	}
	return out, nil
}

// oaiTools converts function tools for the chat template; tools of other types (custom grammar tools) are
// left out rather than refused, as no model here can call them.
func oaiTools(in []openai.Tool) (api.Tools, error) {
	var out api.Tools
	for i, t := range in {
		if t.Type != "function" {
			continue
		}
		var f api.ToolFunction
		if err := json.Unmarshal(t.Function, &f); err != nil || f.Name == "" {
			return nil, errorf(http.StatusBadRequest, "tools[%d].function must be an object with a name and JSON-schema parameters", i)
		}
		tool, err := toolFromFunction(i, t.Function)
		if err != nil {
			return nil, err
		}
		out = append(out, tool)
	}
	return out, nil
}

func oaiThink(r *openai.Reasoning, effort *string) *api.ThinkValue {
	e := ""
	switch {
	case effort != nil:
		e = *effort
	case r != nil:
		e = r.Effort
	}
	switch e {
	case "":
		return nil
	case "none", "minimal":
		return &api.ThinkValue{Value: false}
	case "low", "medium", "high", "max":
		return &api.ThinkValue{Value: e} // the level reaches the chat template as reasoning_effort, as with think
	case "xhigh", "ultra":
		return &api.ThinkValue{Value: "max"} // OpenAI's scale goes past Ollama's "high"; its top is "max"
	}
	return &api.ThinkValue{Value: true}
}

func finishReason(o *outcome) *string {
	r := o.DoneReason
	if o.calls > 0 {
		r = "tool_calls"
	}
	if r == "" {
		r = "stop"
	}
	return &r
}

func oaiToolCalls(calls []api.ToolCall, withIndex bool) []openai.ToolCall {
	out := make([]openai.ToolCall, len(calls))
	for i, c := range calls {
		args, _ := c.Function.Arguments.MarshalJSON()
		out[i] = openai.ToolCall{ID: c.ID, Type: "function", Function: openai.FunctionCall{Name: c.Function.Name, Arguments: string(args)}}
		if withIndex {
			idx := c.Function.Index
			out[i].Index = &idx
		}
	}
	return out
}

func usage(o *outcome) openai.Usage {
	return openai.Usage{PromptTokens: o.PromptTokens, CompletionTokens: o.EvalTokens, TotalTokens: o.PromptTokens + o.EvalTokens}
}

func (s *Server) handleOpenAIChat(c *gin.Context) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	var req openai.ChatCompletionRequest
	if !oaiDecode(c, &req) {
		return
	}
	if err := checkN(req.N); err != nil {
		abortV1(c, err)
		return
	}
	if len(req.Messages) == 0 {
		abortV1(c, errorf(http.StatusBadRequest, "messages must not be empty"))
		return
	}
	format, err := oaiFormat(req.ResponseFormat)
	if err != nil {
		abortV1(c, err)
		return
	}
	msgs, err := oaiMessages(req.Messages)
	if err != nil {
		abortV1(c, err)
		return
	}
	tools, err := oaiTools(req.Tools)
	if err != nil {
		abortV1(c, err)
		return
	}
	tc, err := oaiToolChoice(req.ToolChoice)
	if err != nil {
		abortV1(c, err)
		return
	}
	tools, force, err := applyToolChoice(tc, tools)
	if err != nil {
		abortV1(c, err)
		return
	}
	opts, err := oaiOptions(req.MaxTokens, req.MaxCompletionTokens, req.Seed, req.NumDraft, req.Temperature, req.TopP,
		req.FrequencyPenalty, req.PresencePenalty, req.Stop)
	if err != nil {
		abortV1(c, err)
		return
	}
	j, err := s.newJob(req.Model, opts, nil, format)
	if err != nil {
		abortV1(c, err)
		return
	}
	j.chat, j.messages, j.tools, j.think = true, msgs, tools, oaiThink(req.Reasoning, req.ReasoningEffort)
	j.forceTool = force
	j.noTruncate = !isTrue(req.Truncate) // OpenAI's API never cuts a prompt: context_length_exceeded
	if j.logprobs, j.topLogprobs, err = oaiChatLogprobRequest(req.Logprobs, req.TopLogprobs); err != nil {
		abortV1(c, err)
		return
	}

	id := "chatcmpl-" + randomID(12)
	created := time.Now().Unix()
	if !req.Stream {
		o, r, err := s.runWhole(c.Request.Context(), j)
		if err != nil {
			abortV1(c, err)
			return
		}
		msg := openai.Message{Role: "assistant", ToolCalls: oaiToolCalls(r.calls, false),
			ReasoningContent: r.thinking, Reasoning: r.thinking}
		msg.Content, _ = json.Marshal(r.content)
		if r.content == "" && len(r.calls) > 0 {
			msg.Content = json.RawMessage("null")
		}
		choice := openai.Choice{Index: 0, Message: msg, FinishReason: finishReason(o)}
		if j.logprobs {
			choice.Logprobs = oaiChatLogprobs(r.logprobs)
		}
		c.JSON(http.StatusOK, openai.ChatCompletion{ID: id, Object: "chat.completion", Created: created, Model: req.Model,
			SystemFingerprint: "fp_mlxg", Usage: usage(o), Choices: []openai.Choice{choice}})
		return
	}

	out := &sse{c: c}
	chunk := func(d openai.Delta, finish *string) openai.ChatCompletionChunk {
		return openai.ChatCompletionChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: req.Model,
			SystemFingerprint: "fp_mlxg", Choices: []openai.ChunkChoice{{Index: 0, Delta: d, FinishReason: finish}}}
	}
	first := true
	o, err := s.run(c.Request.Context(), j, func(e event) error {
		d := openai.Delta{ReasoningContent: e.thinking, Reasoning: e.thinking, ToolCalls: oaiToolCalls(e.calls, true)}
		if e.content != "" || first {
			content := e.content
			d.Content = &content
		}
		if first {
			d.Role = "assistant"
			first = false
		}
		ch := chunk(d, nil)
		if j.logprobs && len(e.logprobs) > 0 {
			ch.Choices[0].Logprobs = oaiChatLogprobs(e.logprobs)
		}
		return out.send(ch)
	})
	if err != nil {
		out.fail(err)
		return
	}
	if first { // nothing was generated: still say who speaks
		empty := ""
		if err := out.send(chunk(openai.Delta{Role: "assistant", Content: &empty}, nil)); err != nil {
			return
		}
	}
	if out.send(chunk(openai.Delta{}, finishReason(o))) != nil {
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		u := usage(o)
		if out.send(openai.ChatCompletionChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: req.Model,
			SystemFingerprint: "fp_mlxg", Choices: []openai.ChunkChoice{}, Usage: &u}) != nil {
			return
		}
	}
	_ = out.raw([]byte("[DONE]"))
}

func (s *Server) handleOpenAICompletion(c *gin.Context) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	var req openai.CompletionRequest
	if !oaiDecode(c, &req) {
		return
	}
	if err := checkN(req.N); err != nil {
		abortV1(c, err)
		return
	}
	prompts, err := openai.Inputs(req.Prompt)
	if err != nil || len(prompts) != 1 {
		abortV1(c, errorf(http.StatusBadRequest, "prompt must be a string (or a list of one string)"))
		return
	}
	opts, err := oaiOptions(req.MaxTokens, nil, req.Seed, req.NumDraft, req.Temperature, req.TopP, req.FrequencyPenalty, req.PresencePenalty, req.Stop)
	if err != nil {
		abortV1(c, err)
		return
	}
	j, err := s.newJob(req.Model, opts, nil, nil)
	if err != nil {
		abortV1(c, err)
		return
	}
	j.prompt, j.suffix = prompts[0], req.Suffix
	j.noTruncate = !isTrue(req.Truncate)
	if j.prompt == "" && j.suffix == "" {
		abortV1(c, errorf(http.StatusBadRequest, "prompt must not be empty"))
		return
	}
	if j.logprobs, j.topLogprobs, err = oaiCompletionLogprobRequest(req.Logprobs); err != nil {
		abortV1(c, err)
		return
	}
	offset := 0 // text_offset of the next token, in characters of the choice's text
	if req.Echo {
		offset = utf8.RuneCountInString(j.prompt)
	}
	id := "cmpl-" + randomID(12)
	created := time.Now().Unix()
	if !req.Stream {
		o, r, err := s.runWhole(c.Request.Context(), j)
		if err != nil {
			abortV1(c, err)
			return
		}
		if req.Echo {
			r.content = j.prompt + r.content
		}
		u := usage(o)
		choice := openai.CompletionChoice{Text: r.content, FinishReason: finishReason(o)}
		if j.logprobs {
			choice.Logprobs = oaiCompletionLogprobs(r.logprobs, offset)
		}
		c.JSON(http.StatusOK, openai.Completion{ID: id, Object: "text_completion", Created: created, Model: req.Model,
			SystemFingerprint: "fp_mlxg", Usage: &u, Choices: []openai.CompletionChoice{choice}})
		return
	}

	out := &sse{c: c}
	chunk := func(text string, finish *string) openai.Completion {
		return openai.Completion{ID: id, Object: "text_completion", Created: created, Model: req.Model, SystemFingerprint: "fp_mlxg",
			Choices: []openai.CompletionChoice{{Text: text, FinishReason: finish}}}
	}
	if req.Echo {
		if out.send(chunk(j.prompt, nil)) != nil {
			return
		}
	}
	o, err := s.run(c.Request.Context(), j, func(e event) error {
		if e.content == "" && len(e.logprobs) == 0 {
			return nil
		}
		ch := chunk(e.content, nil)
		if j.logprobs {
			lp := oaiCompletionLogprobs(e.logprobs, offset)
			ch.Choices[0].Logprobs = lp
			if n := len(lp.TextOffset); n > 0 {
				offset = lp.TextOffset[n-1] + utf8.RuneCountInString(lp.Tokens[n-1])
			}
		}
		return out.send(ch)
	})
	if err != nil {
		out.fail(err)
		return
	}
	if out.send(chunk("", finishReason(o))) != nil {
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		u := usage(o)
		if out.send(openai.Completion{ID: id, Object: "text_completion", Created: created, Model: req.Model,
			SystemFingerprint: "fp_mlxg", Choices: []openai.CompletionChoice{}, Usage: &u}) != nil {
			return
		}
	}
	_ = out.raw([]byte("[DONE]"))
}

func ownedBy(name string) string {
	if org, _, ok := strings.Cut(name, "/"); ok {
		return org
	}
	return "library"
}

func (s *Server) handleOpenAIModels(c *gin.Context) {
	models, err := s.cfg.Store.List()
	if err != nil {
		abortV1(c, err)
		return
	}
	list := openai.ModelList{Object: "list", Data: []openai.Model{}}
	for _, m := range models {
		list.Data = append(list.Data, openai.Model{ID: m.Name, Object: "model", Created: m.Modified.Unix(), OwnedBy: ownedBy(m.Name)})
	}
	c.JSON(http.StatusOK, list)
}

func (s *Server) handleOpenAIModel(c *gin.Context) {
	name := strings.TrimPrefix(c.Param("model"), "/")
	m, err := s.resolve(name)
	if err != nil {
		abortV1(c, err)
		return
	}
	c.JSON(http.StatusOK, openai.Model{ID: name, Object: "model", Created: m.Modified.Unix(), OwnedBy: ownedBy(name)})
}

func (s *Server) handleOpenAIEmbeddings(c *gin.Context) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	var req openai.EmbeddingRequest
	if !oaiDecode(c, &req) {
		return
	}
	inputs, err := openai.Inputs(req.Input)
	if err != nil {
		abortV1(c, errorf(http.StatusBadRequest, "%v", err))
		return
	}
	if req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64" {
		abortV1(c, errorf(http.StatusBadRequest, "encoding_format must be \"float\" or \"base64\""))
		return
	}
	if req.Dimensions < 0 {
		abortV1(c, errorf(http.StatusBadRequest, "dimensions must be positive"))
		return
	}
	j, err := s.newJob(req.Model, nil, nil, nil)
	if err != nil {
		abortV1(c, err)
		return
	}
	vecs, n, _, err := s.embed(c.Request.Context(), j, inputs, true)
	if err != nil {
		abortV1(c, err)
		return
	}
	resp := openai.EmbeddingList{Object: "list", Model: req.Model, Usage: openai.EmbeddingUsage{PromptTokens: n, TotalTokens: n}}
	for i, v := range vecs {
		if req.Dimensions > 0 {
			v = normalize(v[:min(req.Dimensions, len(v))])
		}
		var emb any = v
		if req.EncodingFormat == "base64" {
			b := make([]byte, 4*len(v))
			for k, x := range v {
				binary.LittleEndian.PutUint32(b[4*k:], math.Float32bits(x))
			}
			emb = base64.StdEncoding.EncodeToString(b)
		}
		resp.Data = append(resp.Data, openai.Embedding{Object: "embedding", Embedding: emb, Index: i})
	}
	c.JSON(http.StatusOK, resp)
}
