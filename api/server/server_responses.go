package server

// OpenAI's Responses API, POST /v1/responses, over the same chat path as /api/chat: input items become chat
// messages, function tools the template's tools, and the parsed output becomes output items (reasoning,
// message, function_call), whole or as the Responses event stream. previous_response_id continues a
// response this process stored in memory (responseStore: bounded, lost on restart).

import (
	"bytes"
	"container/list"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/openai"
)

// responseStore keeps the conversations of stored responses (store, the default) for previous_response_id:
// at most maxItems responses and about maxBytes of text, the oldest dropped first.
type responseStore struct {
	mu       sync.Mutex
	byID     map[string]*list.Element
	order    *list.List // of *storedResponse, oldest first
	bytes    int
	maxItems int
	maxBytes int
}

type storedResponse struct {
	id       string
	messages []api.Message // the whole conversation, the reply included (without the request's instructions)
	size     int
}

// responses is the process's store: response ids are random, so servers in one process may share it.
var responses = &responseStore{maxItems: 1024, maxBytes: 64 << 20}

func messagesSize(msgs []api.Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Content) + len(m.Thinking) + 64
		for _, im := range m.Images { // a stored conversation keeps its images' bytes
			n += len(im)
		}
		for _, c := range m.ToolCalls {
			n += len(c.Function.Name) + len(c.Function.Arguments.String()) + 32
		}
	}
	return n
}

func (s *responseStore) put(id string, msgs []api.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID, s.order = map[string]*list.Element{}, list.New()
	}
	r := &storedResponse{id: id, messages: msgs, size: messagesSize(msgs)}
	if r.size > s.maxBytes {
		return // too large to keep: a later previous_response_id gets a clear 404
	}
	s.byID[id] = s.order.PushBack(r)
	s.bytes += r.size
	for s.order.Len() > s.maxItems || s.bytes > s.maxBytes {
		old := s.order.Remove(s.order.Front()).(*storedResponse)
		delete(s.byID, old.id)
		s.bytes -= old.size
	}
}

func (s *responseStore) get(id string) ([]api.Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byID[id]
	if !ok {
		return nil, false
	}
	return e.Value.(*storedResponse).messages, true
}

// responsesMessages converts input items to chat messages. A reasoning item's text becomes the thinking
// of the assistant message after it; function_call items join the assistant message they follow (or make
// one); function_call_output items become tool messages named after their call.
func responsesMessages(items []openai.InputItem, prior []api.Message) ([]api.Message, error) {
	out := append([]api.Message(nil), prior...)
	callNames := map[string]string{}
	for _, m := range prior {
		for _, c := range m.ToolCalls {
			callNames[c.ID] = c.Function.Name
		}
	}
	thinking := "" // from a reasoning item, for the next assistant message
	for i, it := range items {
		switch it.Type {
		case "message":
			text, images, err := openai.PartsImages(it.Content)
			if err != nil {
				return nil, errorf(http.StatusBadRequest, "input[%d].%v", i, err)
			}
			role := it.Role
			switch role {
			case "developer", "system":
				role = "system"
			case "user":
			case "assistant":
				// An assistant message may carry input_image parts too (OpenAI's EasyInputMessage takes
				// any role's content list): they stay where they stood, as a user's do.
				msg := api.Message{Role: "assistant", Content: text, Thinking: thinking}
				addImages(&msg, images)
				out = append(out, msg)
				thinking = ""
				continue
			default:
				return nil, errorf(http.StatusBadRequest, "input[%d]: role must be user, assistant, system or developer, not %q", i, it.Role)
			}
			msg := api.Message{Role: role, Content: text}
			addImages(&msg, images)
			out = append(out, msg)
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return nil, errorf(http.StatusBadRequest, "input[%d]: a function_call item needs a call_id and a name", i)
			}
			var args api.ToolCallFunctionArguments
			raw := strings.TrimSpace(it.Arguments)
			if raw == "" {
				raw = "{}"
			}
			if err := args.UnmarshalJSON([]byte(raw)); err != nil {
				return nil, errorf(http.StatusBadRequest, "input[%d].arguments must be a JSON object in a string: %v", i, err)
			}
			if n := len(out); n == 0 || out[n-1].Role != "assistant" || thinking != "" {
				out = append(out, api.Message{Role: "assistant", Thinking: thinking})
				thinking = ""
			}
			last := &out[len(out)-1]
			name := qualify(it.Namespace, it.Name) // as the template offered it (responsesTools)
			last.ToolCalls = append(last.ToolCalls, api.ToolCall{ID: it.CallID,
				Function: api.ToolCallFunction{Index: len(last.ToolCalls), Name: name, Arguments: args}})
			callNames[it.CallID] = name
		case "function_call_output":
			if it.CallID == "" {
				return nil, errorf(http.StatusBadRequest, "input[%d]: a function_call_output item needs a call_id", i)
			}
			text, images, err := openai.PartsImages(it.Output)
			if err != nil {
				return nil, errorf(http.StatusBadRequest, "input[%d].output: %v", i, err)
			}
			msg := api.Message{Role: "tool", Content: text, ToolCallID: it.CallID, ToolName: callNames[it.CallID]}
			addImages(&msg, images)
			out = append(out, msg)
		case "reasoning":
			text, err := openai.PartsText(it.Content)
			if err != nil {
				return nil, errorf(http.StatusBadRequest, "input[%d].content: %v", i, err)
			}
			if text == "" {
				for _, p := range it.Summary {
					text += p.Text
				}
			}
			thinking += text
		case "item_reference":
			return nil, errorf(http.StatusBadRequest, "input[%d]: item_reference is not supported: send the item itself, or continue with previous_response_id", i)
		case "":
			return nil, errorf(http.StatusBadRequest, "input[%d]: an input item needs a type (or a role, for a message)", i)
		default:
			return nil, errorf(http.StatusBadRequest, "input[%d]: item type %q is not supported (use message, function_call, function_call_output or reasoning)", i, it.Type)
		}
	}
	return out, nil
}

// toolRef is a tool the model calls by one name, as the client declared it: a function of a namespace
// tool (namespace and the member's name), or a plain function (namespace "").
type toolRef struct{ namespace, name string }

// qualify is the one function name the chat template gets for a namespace's member, as Ollama names it:
// "namespace.member" (a member already named so keeps its name).
func qualify(namespace, name string) string {
	if namespace == "" || strings.HasPrefix(name, namespace+".") {
		return name
	}
	return namespace + "." + name
}

// responsesToolSet is what a request's tools give the model: function tools for the template, the
// declared namespace and name of each (refs, by the function's name), and the types of the tools left out.
type responsesToolSet struct {
	tools   api.Tools
	refs    map[string]toolRef
	ignored []string
}

// responsesTools converts the tools the model can call: function tools, and the member functions of
// namespace tools (qualify names them for the template; a call is answered with the namespace and name
// the client declared). Other types are tools the model cannot call here (hosted ones such as web_search,
// file_search or code_interpreter, Codex's tool_search, custom grammar tools): they are left out rather
// than refused, so that a client that always sends them still works.
func responsesTools(in []openai.ResponsesTool) (responsesToolSet, error) {
	set := responsesToolSet{refs: map[string]toolRef{}}
	var add func(i int, t openai.ResponsesTool, namespace, field string) error
	add = func(i int, t openai.ResponsesTool, namespace, field string) error {
		switch t.Type {
		case "function":
			name := qualify(namespace, t.Name)
			if t.Name == "" {
				name = ""
			}
			tool, err := functionTool(i, name, t.Description, t.Parameters, field+"parameters")
			if err != nil {
				return err
			}
			set.tools = append(set.tools, tool)
			set.refs[name] = toolRef{namespace: namespace, name: t.Name}
		case "namespace":
			inner := qualify(namespace, t.Name)
			for k, m := range t.Tools {
				if err := add(i, m, inner, fmt.Sprintf("%stools[%d].", field, k)); err != nil {
					return err
				}
			}
		default:
			set.ignored = append(set.ignored, t.Type)
		}
		return nil
	}
	for i, t := range in {
		if err := add(i, t, "", ""); err != nil {
			return responsesToolSet{}, err
		}
	}
	return set, nil
}

// responsesFormat reads text.format: nothing for "text", else the format newJob constrains the reply with
// ("json", or the schema).
func responsesFormat(t *openai.ResponsesText) (json.RawMessage, error) {
	if t == nil || t.Format == nil {
		return nil, nil
	}
	switch t.Format.Type {
	case "", "text":
		return nil, nil
	case "json_object":
		return json.RawMessage(`"json"`), nil
	case "json_schema":
		schema := bytes.TrimSpace(t.Format.Schema)
		if len(schema) == 0 || schema[0] != '{' {
			return nil, errorf(http.StatusBadRequest, "text.format.schema must be a JSON schema object")
		}
		return json.RawMessage(schema), nil
	}
	return nil, errorf(http.StatusBadRequest, "text.format.type must be \"text\", \"json_object\" or \"json_schema\", not %q", t.Format.Type)
}

// responsesJob checks a Responses request and makes its job; it returns the conversation too (for the
// store) and the instructions.
func (s *Server) responsesJob(req *openai.ResponsesRequest) (*job, []api.Message, *string, error) {
	switch {
	case req.Background:
		return nil, nil, nil, errorf(http.StatusBadRequest, "background responses are not supported: mlxg answers while the request is open")
	case len(req.Conversation) > 0 && string(req.Conversation) != "null":
		return nil, nil, nil, errorf(http.StatusBadRequest, "conversation is not supported: send the items in input, or continue with previous_response_id")
	case len(req.Prompt) > 0 && string(req.Prompt) != "null":
		return nil, nil, nil, errorf(http.StatusBadRequest, "prompt (stored prompt templates) is not supported: send instructions and input")
	}
	switch req.Truncation {
	case "", "auto", "disabled":
	default:
		return nil, nil, nil, errorf(http.StatusBadRequest, "truncation must be \"auto\" or \"disabled\", not %q", req.Truncation)
	}
	var instructions *string
	if raw := bytes.TrimSpace(req.Instructions); len(raw) > 0 && string(raw) != "null" {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, nil, errorf(http.StatusBadRequest, "instructions must be a string")
		}
		instructions = &s
	}
	items, err := openai.InputItems(req.Input)
	if err != nil {
		return nil, nil, nil, errorf(http.StatusBadRequest, "%v", err)
	}
	var prior []api.Message
	if req.PreviousResponseID != "" {
		var ok bool
		if prior, ok = responses.get(req.PreviousResponseID); !ok {
			return nil, nil, nil, errorf(http.StatusNotFound, "previous response %q not found: mlxg keeps stored responses in memory (the last %d, until it restarts), and not those made with store false; send the whole conversation in input instead", req.PreviousResponseID, responses.maxItems)
		}
	}
	conv, err := responsesMessages(items, prior)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(conv) == 0 {
		return nil, nil, nil, errorf(http.StatusBadRequest, "input must not be empty")
	}
	set, err := responsesTools(req.Tools)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(set.ignored) > 0 {
		s.log.Debug("tools the model cannot call here are left out", "types", set.ignored)
	}
	tc, err := responsesToolChoice(req.ToolChoice)
	if err != nil {
		return nil, nil, nil, err
	}
	tools, force, err := applyToolChoice(tc, set.tools)
	if err != nil {
		return nil, nil, nil, err
	}
	format, err := responsesFormat(req.Text)
	if err != nil {
		return nil, nil, nil, err
	}
	opts := draftOption(req.NumDraft)
	if req.MaxOutputTokens != nil {
		if *req.MaxOutputTokens < 1 {
			return nil, nil, nil, errorf(http.StatusBadRequest, "max_output_tokens must be at least 1")
		}
		opts["num_predict"] = float64(*req.MaxOutputTokens)
	}
	if req.Temperature != nil {
		opts["temperature"] = *req.Temperature
	}
	if req.TopP != nil {
		opts["top_p"] = *req.TopP
	}
	j, err := s.newJob(req.Model, opts, nil, format)
	if err != nil {
		return nil, nil, nil, err
	}
	msgs := conv
	if instructions != nil && *instructions != "" {
		msgs = append([]api.Message{{Role: "system", Content: *instructions}}, conv...)
	}
	j.chat, j.messages, j.tools, j.think = true, msgs, tools, oaiThink(req.Reasoning, nil)
	j.forceTool = force
	// truncation "auto" drops the oldest messages (as OpenAI's does); "disabled", OpenAI's default, makes
	// a conversation over the context a 400 context_length_exceeded.
	j.noTruncate = req.Truncation != "auto"
	return j, conv, instructions, nil
}

// responseShell is the response object before any output: what response.created carries, and what the
// final object fills in.
func responseShell(req *openai.ResponsesRequest, id string, created int64, instructions *string) openai.Response {
	r := openai.Response{ID: id, Object: "response", CreatedAt: created, Status: "in_progress", Instructions: instructions,
		MaxOutputTokens: req.MaxOutputTokens, Model: req.Model, Output: []openai.OutputItem{}, ParallelToolCalls: true,
		Temperature: req.Temperature, TopP: req.TopP, Tools: req.Tools, Truncation: "disabled",
		Store: req.Store == nil || *req.Store, Metadata: req.Metadata,
		Text: openai.ResponsesText{Format: &openai.ResponsesFormat{Type: "text"}}}
	if req.ParallelToolCalls != nil {
		r.ParallelToolCalls = *req.ParallelToolCalls
	}
	if req.Truncation != "" {
		r.Truncation = req.Truncation
	}
	if r.Tools == nil {
		r.Tools = []openai.ResponsesTool{}
	}
	if r.Metadata == nil {
		r.Metadata = map[string]any{}
	}
	r.ToolChoice = req.ToolChoice
	if len(r.ToolChoice) == 0 {
		r.ToolChoice = json.RawMessage(`"auto"`)
	}
	if req.Reasoning != nil {
		r.Reasoning = *req.Reasoning
	}
	if req.Text != nil && req.Text.Format != nil {
		r.Text.Format = req.Text.Format
	}
	if req.PreviousResponseID != "" {
		p := req.PreviousResponseID
		r.PreviousResponseID = &p
	}
	return r
}

// finishResponse fills in the status, usage and output of a finished response.
func finishResponse(r *openai.Response, o *outcome, output []openai.OutputItem) {
	now := time.Now().Unix()
	r.CompletedAt = &now
	r.Status = "completed"
	if o.DoneReason == "length" && o.calls == 0 {
		r.Status = "incomplete"
		r.IncompleteDetails = &openai.IncompleteReason{Reason: "max_output_tokens"}
	}
	r.Output = output
	r.OutputText = ""
	for _, it := range output {
		if it.Type == "message" && it.Content != nil {
			for _, p := range *it.Content {
				r.OutputText += p.Text
			}
		}
	}
	r.Usage = &openai.ResponsesUsage{InputTokens: o.PromptTokens, OutputTokens: o.EvalTokens, TotalTokens: o.PromptTokens + o.EvalTokens}
}

// Output items.

func emptyList() *[]any { l := []any{}; return &l }

func reasoningItem(id, text, status string) openai.OutputItem {
	summary := []openai.OutputPart{}
	content := []openai.OutputPart{}
	if status == "completed" {
		content = append(content, openai.OutputPart{Type: "reasoning_text", Text: text})
	}
	return openai.OutputItem{Type: "reasoning", ID: id, Status: status, Summary: &summary, Content: &content}
}

func outputText(text string) openai.OutputPart {
	return openai.OutputPart{Type: "output_text", Text: text, Annotations: emptyList(), Logprobs: emptyList()}
}

func messageItem(id, text, status string) openai.OutputItem {
	content := []openai.OutputPart{}
	if status == "completed" {
		content = append(content, outputText(text))
	}
	return openai.OutputItem{Type: "message", ID: id, Status: status, Role: "assistant", Content: &content}
}

// functionCallItem is a call as an output item: a namespace member's call carries the namespace and the
// member's name as the client declared them (refs), which is how Codex routes it.
func functionCallItem(call api.ToolCall, args, status string, refs map[string]toolRef) openai.OutputItem {
	item := openai.OutputItem{Type: "function_call", ID: "fc_" + strings.TrimPrefix(call.ID, "call_"), Status: status,
		CallID: call.ID, Name: call.Function.Name, Arguments: &args}
	if ref, ok := refs[call.Function.Name]; ok && ref.namespace != "" {
		item.Name, item.Namespace = ref.name, ref.namespace
	}
	return item
}

// replyMessage is the reply as a chat message, for the store.
func replyMessage(text, thinking string, calls []api.ToolCall) api.Message {
	return api.Message{Role: "assistant", Content: text, Thinking: thinking, ToolCalls: calls}
}

func (s *Server) handleResponses(c *gin.Context) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	var req openai.ResponsesRequest
	if !oaiDecode(c, &req) {
		return
	}
	j, conv, instructions, err := s.responsesJob(&req)
	if err != nil {
		abortV1(c, err)
		return
	}
	id := "resp_" + randomID(16)
	set, _ := responsesTools(req.Tools) // checked by responsesJob
	refs := set.refs
	resp := responseShell(&req, id, time.Now().Unix(), instructions)
	store := func(text, thinking string, calls []api.ToolCall) {
		if resp.Store {
			responses.put(id, append(conv[:len(conv):len(conv)], replyMessage(text, thinking, calls)))
		}
	}
	if !req.Stream {
		o, r, err := s.runWhole(c.Request.Context(), j)
		if err != nil {
			abortV1(c, err)
			return
		}
		var output []openai.OutputItem
		if r.thinking != "" {
			output = append(output, reasoningItem("rs_"+randomID(12), r.thinking, "completed"))
		}
		if r.content != "" || len(r.calls) == 0 {
			output = append(output, messageItem("msg_"+randomID(12), r.content, "completed"))
		}
		for _, call := range r.calls {
			args, _ := call.Function.Arguments.MarshalJSON()
			output = append(output, functionCallItem(call, string(args), "completed", refs))
		}
		finishResponse(&resp, o, output)
		store(r.content, r.thinking, r.calls)
		c.JSON(http.StatusOK, resp)
		return
	}

	st := &responsesStream{out: &eventStream{c: c}, resp: &resp, refs: refs}
	o, err := s.run(c.Request.Context(), j, st.event)
	if err != nil {
		st.fail(err)
		return
	}
	if st.finish(o) == nil {
		store(st.text.String(), st.thinking.String(), st.calls)
	}
}

// responsesStream writes a reply as the Responses event stream: response.created and
// response.in_progress (with the first output, so that an error before it still gets its HTTP status),
// then each output item's added / part / delta / done events, then response.completed (or
// response.incomplete when max_output_tokens cut it).
type responsesStream struct {
	out    *eventStream
	resp   *openai.Response
	seq    int
	output []openai.OutputItem // finished items

	open    string // the open item's type: "", "reasoning" or "message"
	openID  string
	partBuf strings.Builder // the open item's text

	text, thinking strings.Builder
	calls          []api.ToolCall
	refs           map[string]toolRef // the declared names of the tools (responsesTools)
}

func (r *responsesStream) send(ev openai.StreamEvent) error {
	ev.SequenceNumber = r.seq
	r.seq++
	return r.out.send(ev.Type, ev)
}

func intp(i int) *int       { return &i }
func strp(s string) *string { return &s }

func (r *responsesStream) start() error {
	if r.out.started {
		return nil
	}
	snap := *r.resp
	if err := r.send(openai.StreamEvent{Type: "response.created", Response: &snap}); err != nil {
		return err
	}
	return r.send(openai.StreamEvent{Type: "response.in_progress", Response: &snap})
}

// openItem starts a reasoning or message item with its one content part.
func (r *responsesStream) openItem(kind string) error {
	if err := r.closeItem(); err != nil {
		return err
	}
	idx := len(r.output)
	r.open, r.partBuf = kind, strings.Builder{}
	var item openai.OutputItem
	var part openai.OutputPart
	if kind == "reasoning" {
		r.openID = "rs_" + randomID(12)
		item, part = reasoningItem(r.openID, "", "in_progress"), openai.OutputPart{Type: "reasoning_text"}
	} else {
		r.openID = "msg_" + randomID(12)
		item, part = messageItem(r.openID, "", "in_progress"), outputText("")
	}
	if err := r.send(openai.StreamEvent{Type: "response.output_item.added", OutputIndex: intp(idx), Item: &item}); err != nil {
		return err
	}
	return r.send(openai.StreamEvent{Type: "response.content_part.added", OutputIndex: intp(idx), ItemID: r.openID,
		ContentIndex: intp(0), Part: &part})
}

func (r *responsesStream) delta(d string) error {
	r.partBuf.WriteString(d)
	ev := openai.StreamEvent{Type: "response.output_text.delta", OutputIndex: intp(len(r.output)), ItemID: r.openID,
		ContentIndex: intp(0), Delta: &d, Logprobs: emptyList()}
	if r.open == "reasoning" {
		ev.Type, ev.Logprobs = "response.reasoning_text.delta", nil
	}
	return r.send(ev)
}

// closeItem ends the open reasoning or message item.
func (r *responsesStream) closeItem() error {
	if r.open == "" {
		return nil
	}
	idx, text := len(r.output), r.partBuf.String()
	var item openai.OutputItem
	var part openai.OutputPart
	done := openai.StreamEvent{Type: "response.output_text.done", OutputIndex: intp(idx), ItemID: r.openID,
		ContentIndex: intp(0), Text: &text, Logprobs: emptyList()}
	if r.open == "reasoning" {
		item, part = reasoningItem(r.openID, text, "completed"), openai.OutputPart{Type: "reasoning_text", Text: text}
		done.Type, done.Logprobs = "response.reasoning_text.done", nil
	} else {
		item, part = messageItem(r.openID, text, "completed"), outputText(text)
	}
	r.open = ""
	r.output = append(r.output, item)
	if err := r.send(done); err != nil {
		return err
	}
	if err := r.send(openai.StreamEvent{Type: "response.content_part.done", OutputIndex: intp(idx), ItemID: item.ID,
		ContentIndex: intp(0), Part: &part}); err != nil {
		return err
	}
	return r.send(openai.StreamEvent{Type: "response.output_item.done", OutputIndex: intp(idx), Item: &item})
}

func (r *responsesStream) event(e event) error {
	if err := r.start(); err != nil {
		return err
	}
	if e.thinking != "" {
		r.thinking.WriteString(e.thinking)
		if r.open != "reasoning" {
			if err := r.openItem("reasoning"); err != nil {
				return err
			}
		}
		if err := r.delta(e.thinking); err != nil {
			return err
		}
	}
	if e.content != "" {
		r.text.WriteString(e.content)
		if r.open != "message" {
			if err := r.openItem("message"); err != nil {
				return err
			}
		}
		if err := r.delta(e.content); err != nil {
			return err
		}
	}
	for _, call := range e.calls {
		if err := r.closeItem(); err != nil {
			return err
		}
		r.calls = append(r.calls, call)
		idx := len(r.output)
		args, _ := call.Function.Arguments.MarshalJSON()
		a := string(args)
		added := functionCallItem(call, "", "in_progress", r.refs)
		if err := r.send(openai.StreamEvent{Type: "response.output_item.added", OutputIndex: intp(idx), Item: &added}); err != nil {
			return err
		}
		if err := r.send(openai.StreamEvent{Type: "response.function_call_arguments.delta", OutputIndex: intp(idx),
			ItemID: added.ID, Delta: &a}); err != nil {
			return err
		}
		if err := r.send(openai.StreamEvent{Type: "response.function_call_arguments.done", OutputIndex: intp(idx),
			ItemID: added.ID, Name: added.Name, Arguments: &a}); err != nil {
			return err
		}
		item := functionCallItem(call, a, "completed", r.refs)
		r.output = append(r.output, item)
		if err := r.send(openai.StreamEvent{Type: "response.output_item.done", OutputIndex: intp(idx), Item: &item}); err != nil {
			return err
		}
	}
	return nil
}

func (r *responsesStream) finish(o *outcome) error {
	if err := r.start(); err != nil {
		return err
	}
	if len(r.output) == 0 && r.open == "" { // nothing was generated: an empty message, as a whole reply has
		if err := r.openItem("message"); err != nil {
			return err
		}
	}
	if err := r.closeItem(); err != nil {
		return err
	}
	finishResponse(r.resp, o, r.output)
	kind := "response.completed"
	if r.resp.Status == "incomplete" {
		kind = "response.incomplete"
	}
	return r.send(openai.StreamEvent{Type: kind, Response: r.resp})
}

// fail reports err: as the HTTP status when nothing was sent yet, else as an error event and
// response.failed.
func (r *responsesStream) fail(err error) {
	status, msg := statusOf(err)
	if status == 499 {
		return // the client is gone
	}
	if !r.out.started {
		abortV1(r.out.c, err)
		return
	}
	noteError(r.out.c, status, msg)
	e := openai.NewError(status, msg).Error
	if r.send(openai.StreamEvent{Type: "error", Code: strp(e.Type), Message: msg}) != nil {
		return
	}
	r.resp.Status, r.resp.Output = "failed", r.output
	r.resp.Error = &openai.ResponseError{Code: "server_error", Message: msg}
	_ = r.send(openai.StreamEvent{Type: "response.failed", Response: r.resp})
}
