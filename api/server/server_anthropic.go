package server

// Anthropic's Messages API, POST /v1/messages, over the same chat path as /api/chat: the request becomes
// chat messages and tools for the model's template, and the parsed output (thinking, text, tool calls)
// becomes Anthropic's content blocks, whole or as its SSE event sequence.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/anthropic"
	"github.com/mlxg/mlxg/api/openai"
)

// eventStream writes Server-Sent Events with a name: "event: NAME\ndata: {json}\n\n", as Anthropic's and
// OpenAI's Responses streams do. The headers go out with the first event.
type eventStream struct {
	c       *gin.Context
	started bool
}

func (s *eventStream) send(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if !s.started {
		h := s.c.Writer.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
		s.c.Status(http.StatusOK)
		s.started = true
	}
	if _, err := fmt.Fprintf(s.c.Writer, "event: %s\ndata: %s\n\n", name, b); err != nil {
		return err
	}
	s.c.Writer.Flush()
	return s.c.Request.Context().Err()
}

// anthropicMessages converts system and messages to chat messages. A user message's tool_result blocks
// become tool messages (named after the tool_use they answer), its text blocks a user message, in order;
// an assistant message's text, thinking and tool_use blocks become one assistant message. A system turn
// among the messages (Claude Code sends them for models not named Claude) stays a system message where
// it is, as Ollama renders it: its content is a string or text blocks.
func anthropicMessages(system json.RawMessage, in []anthropic.MessageParam) ([]api.Message, error) {
	var out []api.Message
	sys, err := anthropic.SystemText(system)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "%v", err)
	}
	if sys != "" {
		out = append(out, api.Message{Role: "system", Content: sys})
	}
	toolNames := map[string]string{} // tool_use id -> tool name
	for i, m := range in {
		if m.Role == "system" {
			text, err := anthropic.SystemText(m.Content)
			if err != nil {
				return nil, errorf(http.StatusBadRequest, "messages[%d].content%s", i, strings.TrimPrefix(err.Error(), "system"))
			}
			if text != "" {
				out = append(out, api.Message{Role: "system", Content: text})
			}
			continue
		}
		blocks, err := anthropic.Blocks(m.Content)
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "messages[%d].%v", i, err)
		}
		if len(blocks) == 0 {
			return nil, errorf(http.StatusBadRequest, "messages[%d].content must not be empty", i)
		}
		switch m.Role {
		case "assistant":
			msg := api.Message{Role: "assistant"}
			for k, b := range blocks {
				switch b.Type {
				case "text":
					msg.Content += b.Text
				case "thinking":
					msg.Thinking += b.Thinking
				case "redacted_thinking": // encrypted by Anthropic: nothing a local model can read
				case "tool_use":
					var args api.ToolCallFunctionArguments
					if err := args.UnmarshalJSON(b.Input); err != nil {
						return nil, errorf(http.StatusBadRequest, "messages[%d].content[%d].input must be a JSON object: %v", i, k, err)
					}
					msg.ToolCalls = append(msg.ToolCalls, api.ToolCall{ID: b.ID,
						Function: api.ToolCallFunction{Index: len(msg.ToolCalls), Name: b.Name, Arguments: args}})
					toolNames[b.ID] = b.Name
				default:
					return nil, errorf(http.StatusBadRequest, "messages[%d].content[%d]: %s blocks belong in user messages", i, k, b.Type)
				}
			}
			out = append(out, msg)
		case "user":
			var text []string
			var images []openai.Image
			flush := func() {
				if len(text) > 0 || len(images) > 0 {
					msg := api.Message{Role: "user", Content: strings.Join(text, "\n")}
					addImages(&msg, images)
					out = append(out, msg)
					text, images = nil, nil
				}
			}
			for k, b := range blocks {
				switch b.Type {
				case "text":
					text = append(text, b.Text)
				case "image":
					data, _ := b.Image() // checked by Blocks
					at := len(strings.Join(text, "\n"))
					if len(text) > 0 {
						at++ // the newline before the next text block
					}
					images = append(images, openai.Image{Data: data, At: at})
				case "tool_result":
					flush()
					content, timages, _ := b.ResultContent() // checked by Blocks
					if b.IsError && content == "" && len(timages) == 0 {
						content = "error"
					}
					msg := api.Message{Role: "tool", Content: content, ToolCallID: b.ToolUseID, ToolName: toolNames[b.ToolUseID]}
					addImages(&msg, timages)
					out = append(out, msg)
				default:
					return nil, errorf(http.StatusBadRequest, "messages[%d].content[%d]: %s blocks belong in assistant messages", i, k, b.Type)
				}
			}
			flush()
		default:
			return nil, errorf(http.StatusBadRequest, "messages[%d]: role must be \"user\", \"assistant\" or \"system\", not %q", i, m.Role)
		}
	}
	return out, nil
}

// anthropicTools converts client tools to function tools for the chat template. Anthropic's server and
// built-in tools (web_search_20250305, bash_20250124...) are left out rather than refused: mlxg runs
// none of them, and a client that always sends them still works.
func anthropicTools(in []anthropic.Tool) (api.Tools, error) {
	var out api.Tools
	for i, t := range in {
		if t.Type != "" && t.Type != "custom" {
			continue
		}
		tool, err := functionTool(i, t.Name, t.Description, t.InputSchema, "input_schema")
		if err != nil {
			return nil, err
		}
		out = append(out, tool)
	}
	return out, nil
}

// anthropicThink maps thinking to think: enabled on, disabled off; absent or adaptive leaves the
// model's default (thinking models think, as on /api/chat).
func anthropicThink(t *anthropic.Thinking) (*api.ThinkValue, error) {
	if t == nil {
		return nil, nil
	}
	if t.BudgetTokens != nil && *t.BudgetTokens < 1 {
		return nil, errorf(http.StatusBadRequest, "thinking.budget_tokens must be at least 1")
	}
	switch t.Type {
	case "enabled":
		return &api.ThinkValue{Value: true}, nil
	case "disabled":
		return &api.ThinkValue{Value: false}, nil
	case "adaptive":
		return nil, nil
	}
	return nil, errorf(http.StatusBadRequest, "thinking.type must be \"enabled\", \"disabled\" or \"adaptive\", not %q", t.Type)
}

// anthropicStop is the stop_reason and stop_sequence of a finished generation.
func anthropicStop(o *outcome) (*string, *string) {
	reason := "end_turn"
	var seq *string
	switch {
	case o.calls > 0:
		reason = "tool_use"
	case o.StopSequence != "":
		reason = "stop_sequence"
		s := o.StopSequence
		seq = &s
	case o.DoneReason == "length":
		reason = "max_tokens"
	}
	return &reason, seq
}

// anthropicJob checks a Messages request and makes its job.
func (s *Server) anthropicJob(req *anthropic.MessagesRequest) (*job, error) {
	if req.Model == "" {
		return nil, errorf(http.StatusBadRequest, "model is required")
	}
	if req.MaxTokens == nil {
		return nil, errorf(http.StatusBadRequest, "max_tokens is required")
	}
	if *req.MaxTokens < 1 {
		return nil, errorf(http.StatusBadRequest, "max_tokens must be at least 1")
	}
	if len(req.Messages) == 0 {
		return nil, errorf(http.StatusBadRequest, "messages must not be empty")
	}
	msgs, err := anthropicMessages(req.System, req.Messages)
	if err != nil {
		return nil, err
	}
	tools, err := anthropicTools(req.Tools)
	if err != nil {
		return nil, err
	}
	tc, err := anthropicToolChoice(req.ToolChoice)
	if err != nil {
		return nil, err
	}
	tools, force, err := applyToolChoice(tc, tools)
	if err != nil {
		return nil, err
	}
	think, err := anthropicThink(req.Thinking)
	if err != nil {
		return nil, err
	}
	if req.Temperature != nil && *req.Temperature < 0 {
		return nil, errorf(http.StatusBadRequest, "temperature must be 0 or more")
	}
	if req.TopP != nil && (*req.TopP < 0 || *req.TopP > 1) {
		return nil, errorf(http.StatusBadRequest, "top_p must be between 0 and 1")
	}
	if req.TopK != nil && *req.TopK < 0 {
		return nil, errorf(http.StatusBadRequest, "top_k must be 0 or more")
	}
	opts := draftOption(req.NumDraft)
	opts["num_predict"] = float64(*req.MaxTokens)
	if req.Temperature != nil {
		opts["temperature"] = *req.Temperature
	}
	if req.TopP != nil {
		opts["top_p"] = *req.TopP
	}
	if req.TopK != nil {
		opts["top_k"] = float64(*req.TopK)
	}
	if len(req.StopSequences) > 0 {
		list := make([]any, 0, len(req.StopSequences))
		for i, st := range req.StopSequences {
			if st == "" {
				return nil, errorf(http.StatusBadRequest, "stop_sequences[%d] must not be empty", i)
			}
			list = append(list, st)
		}
		opts["stop"] = list
	}
	j, err := s.newJob(req.Model, opts, nil, nil)
	if err != nil {
		return nil, err
	}
	j.chat, j.messages, j.tools, j.think = true, msgs, tools, think
	j.forceTool = force
	j.noTruncate = !isTrue(req.Truncate) // Anthropic's API never cuts a prompt: "prompt is too long"
	return j, nil
}

func (s *Server) handleAnthropicMessages(c *gin.Context) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	var req anthropic.MessagesRequest
	if err := decode(c, &req); err != nil {
		abortV1(c, err)
		return
	}
	j, err := s.anthropicJob(&req)
	if err != nil {
		abortV1(c, err)
		return
	}
	id := "msg_" + randomID(12)
	if !req.Stream {
		o, r, err := s.runWhole(c.Request.Context(), j)
		if err != nil {
			abortV1(c, err)
			return
		}
		content := []anthropic.ReplyBlock{}
		if r.thinking != "" {
			content = append(content, anthropic.ThinkingBlock(r.thinking))
		}
		if r.content != "" || len(r.calls) == 0 {
			content = append(content, anthropic.TextBlock(r.content))
		}
		for _, call := range r.calls {
			args, _ := call.Function.Arguments.MarshalJSON()
			content = append(content, anthropic.ToolUseBlock(toolUseID(call), call.Function.Name, args))
		}
		reason, seq := anthropicStop(o)
		c.JSON(http.StatusOK, anthropic.Reply{ID: id, Type: "message", Role: "assistant", Model: req.Model,
			Content: content, StopReason: reason, StopSequence: seq,
			Usage: anthropic.Usage{InputTokens: o.PromptTokens, OutputTokens: o.EvalTokens}})
		return
	}

	st := &anthropicStream{out: &eventStream{c: c}, id: id, model: req.Model}
	o, err := s.run(c.Request.Context(), j, st.event)
	if err != nil {
		st.fail(err)
		return
	}
	_ = st.finish(o)
}

// toolUseID is a tool call's id in Anthropic's form.
func toolUseID(c api.ToolCall) string {
	return "toolu_" + strings.TrimPrefix(c.ID, "call_")
}

// anthropicStream writes a reply as Anthropic's event sequence: message_start and ping (with the first
// output, so that an error before it still gets its HTTP status), then for each content block
// content_block_start, its deltas and content_block_stop, then message_delta and message_stop.
type anthropicStream struct {
	out       *eventStream
	id, model string
	index     int    // the next block's index
	open      string // the open block's type: "", "text" or "thinking"
}

func (a *anthropicStream) start() error {
	if a.out.started {
		return nil
	}
	if err := a.out.send("message_start", anthropic.MessageStart{Type: "message_start", Message: anthropic.Reply{
		ID: a.id, Type: "message", Role: "assistant", Model: a.model, Content: []anthropic.ReplyBlock{}}}); err != nil {
		return err
	}
	return a.out.send("ping", anthropic.Event{Type: "ping"})
}

func (a *anthropicStream) openBlock(b anthropic.ReplyBlock) error {
	if err := a.closeBlock(); err != nil {
		return err
	}
	a.open = b.Type
	return a.out.send("content_block_start", anthropic.ContentBlockStart{Type: "content_block_start", Index: a.index, ContentBlock: b})
}

func (a *anthropicStream) closeBlock() error {
	if a.open == "" {
		return nil
	}
	a.open = ""
	a.index++
	return a.out.send("content_block_stop", anthropic.ContentBlockStop{Type: "content_block_stop", Index: a.index - 1})
}

func (a *anthropicStream) delta(d anthropic.Delta) error {
	return a.out.send("content_block_delta", anthropic.ContentBlockDelta{Type: "content_block_delta", Index: a.index, Delta: d})
}

func (a *anthropicStream) event(e event) error {
	if err := a.start(); err != nil {
		return err
	}
	if e.thinking != "" {
		if a.open != "thinking" {
			if err := a.openBlock(anthropic.ThinkingBlock("")); err != nil {
				return err
			}
		}
		t := e.thinking
		if err := a.delta(anthropic.Delta{Type: "thinking_delta", Thinking: &t}); err != nil {
			return err
		}
	}
	if e.content != "" {
		if a.open != "text" {
			if err := a.openBlock(anthropic.TextBlock("")); err != nil {
				return err
			}
		}
		t := e.content
		if err := a.delta(anthropic.Delta{Type: "text_delta", Text: &t}); err != nil {
			return err
		}
	}
	for _, call := range e.calls {
		if err := a.openBlock(anthropic.ToolUseBlock(toolUseID(call), call.Function.Name, json.RawMessage("{}"))); err != nil {
			return err
		}
		args, _ := call.Function.Arguments.MarshalJSON()
		partial := string(args)
		if err := a.delta(anthropic.Delta{Type: "input_json_delta", PartialJSON: &partial}); err != nil {
			return err
		}
		if err := a.closeBlock(); err != nil {
			return err
		}
	}
	return nil
}

func (a *anthropicStream) finish(o *outcome) error {
	if err := a.start(); err != nil {
		return err
	}
	if a.index == 0 && a.open == "" { // nothing was generated: one empty text block, as a whole reply has
		if err := a.openBlock(anthropic.TextBlock("")); err != nil {
			return err
		}
	}
	if err := a.closeBlock(); err != nil {
		return err
	}
	reason, seq := anthropicStop(o)
	if err := a.out.send("message_delta", anthropic.MessageDelta{Type: "message_delta",
		Delta: anthropic.MessageDeltaBody{StopReason: reason, StopSequence: seq},
		Usage: anthropic.Usage{InputTokens: o.PromptTokens, OutputTokens: o.EvalTokens}}); err != nil {
		return err
	}
	return a.out.send("message_stop", anthropic.Event{Type: "message_stop"})
}

// fail reports err: as the HTTP status when nothing was sent yet, else as an error event.
func (a *anthropicStream) fail(err error) {
	status, msg := statusOf(err)
	if status == 499 {
		return // the client is gone
	}
	if a.out.started {
		noteError(a.out.c, status, msg)
		_ = a.out.send("error", anthropic.NewError(status, msg))
		return
	}
	abortV1(a.out.c, err)
}
