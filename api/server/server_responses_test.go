package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/api/openai"
	"github.com/mlxg/mlxg/runner/sched"
	"github.com/mlxg/mlxg/text/constrain/constraintest"
)

const respWeatherTool = `{"type":"function","name":"get_weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}`

type respObject struct {
	ID, Object, Status, Model string
	OutputText                string                   `json:"output_text"`
	PreviousResponseID        *string                  `json:"previous_response_id"`
	IncompleteDetails         *struct{ Reason string } `json:"incomplete_details"`
	Output                    []struct {
		Type, ID, Status, Role, Name, Arguments, Namespace string
		CallID                                             string `json:"call_id"`
		Content                                            []struct{ Type, Text string }
		Summary                                            []any
	}
	Usage struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	}
}

func TestResponses(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	post := func(body string) respObject {
		t.Helper()
		resp, b := ts.post(t, "/v1/responses", body)
		var r respObject
		if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		if r.Object != "response" || !strings.HasPrefix(r.ID, "resp_") || r.Model != "scripted" || r.Usage.InputTokens == 0 ||
			r.Usage.OutputTokens == 0 || r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens {
			t.Fatalf("response %s", b)
		}
		return r
	}

	// A thinking model thinks and calls the tool: a reasoning item and a function_call item.
	first := post(`{"model":"scripted","input":"Weather in Paris?","tools":[` + respWeatherTool + `]}`)
	if first.Status != "completed" || len(first.Output) != 2 || first.Output[0].Type != "reasoning" ||
		len(first.Output[0].Content) != 1 || first.Output[0].Content[0].Text != apitest.ToolThinking || first.Output[0].Summary == nil ||
		first.Output[1].Type != "function_call" || first.Output[1].Name != apitest.ToolName ||
		first.Output[1].Arguments != apitest.ToolArguments || first.Output[1].CallID == "" || first.Output[1].Status != "completed" {
		t.Fatalf("tool call %+v", first)
	}
	call := first.Output[1]

	// Continuing with previous_response_id gives the model the same conversation as sending it whole.
	output := `{"type":"function_call_output","call_id":"` + call.CallID + `","output":"sunny, 24 C"}`
	cont := post(`{"model":"scripted","previous_response_id":"` + first.ID + `","reasoning":{"effort":"none"},
		"input":[` + output + `],"tools":[` + respWeatherTool + `]}`)
	whole := post(`{"model":"scripted","store":false,"reasoning":{"effort":"none"},"tools":[` + respWeatherTool + `],"input":[
		{"role":"user","content":"Weather in Paris?"},
		{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"` + apitest.ToolThinking + `"}]},
		{"type":"function_call","call_id":"` + call.CallID + `","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},` + output + `]}`)
	for _, r := range []respObject{cont, whole} {
		if r.Status != "completed" || len(r.Output) != 1 || r.Output[0].Type != "message" || r.Output[0].Role != "assistant" ||
			r.Output[0].Content[0].Type != "output_text" || r.Output[0].Content[0].Text != apitest.PlainReply || r.OutputText != apitest.PlainReply {
			t.Fatalf("after the tool output %+v", r)
		}
	}
	if cont.Usage.InputTokens != whole.Usage.InputTokens || cont.PreviousResponseID == nil || *cont.PreviousResponseID != first.ID {
		t.Fatalf("previous_response_id: %d input tokens, the whole conversation %d", cont.Usage.InputTokens, whole.Usage.InputTokens)
	}
	// store false was not stored.
	resp, body := ts.post(t, "/v1/responses", `{"model":"scripted","previous_response_id":"`+whole.ID+`","input":"more"}`)
	if resp.StatusCode != 404 || !strings.Contains(string(body), "not found") {
		t.Fatalf("a response stored with store false: %d %s", resp.StatusCode, body)
	}

	// instructions reach the template as a system message; max_output_tokens ends incomplete.
	plain := post(`{"model":"scripted","input":[{"role":"user","content":[{"type":"input_text","text":"Weather?"}]}],"reasoning":{"effort":"none"}}`)
	instr := post(`{"model":"scripted","input":"Weather?","instructions":"Answer in one sentence.","reasoning":{"effort":"none"}}`)
	if instr.Usage.InputTokens <= plain.Usage.InputTokens || instr.OutputText != apitest.PlainReply {
		t.Fatalf("instructions: %d input tokens, %d without", instr.Usage.InputTokens, plain.Usage.InputTokens)
	}
	short := post(`{"model":"scripted","input":"Weather?","max_output_tokens":2,"reasoning":{"effort":"none"}}`)
	if short.Status != "incomplete" || short.IncompleteDetails == nil || short.IncompleteDetails.Reason != "max_output_tokens" || short.Usage.OutputTokens != 2 {
		t.Fatalf("max_output_tokens %+v", short)
	}
}

func TestResponsesStream(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	resp, body := ts.post(t, "/v1/responses", `{"model":"scripted","stream":true,"input":"Weather in Paris?","tools":[`+respWeatherTool+`]}`)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var names []string
	var reasoning, args string
	var final respObject
	for i, chunk := range strings.Split(strings.TrimSpace(string(body)), "\n\n") {
		name, data, ok := strings.Cut(chunk, "\ndata: ")
		if !ok || !strings.HasPrefix(name, "event: ") {
			t.Fatalf("not an SSE event: %q", chunk)
		}
		var ev struct {
			Type           string
			SequenceNumber int `json:"sequence_number"`
			Delta          string
			Response       json.RawMessage
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Type != strings.TrimPrefix(name, "event: ") || ev.SequenceNumber != i {
			t.Fatalf("event %d %q: %v", i, chunk, err)
		}
		if n := len(names); n == 0 || names[n-1] != ev.Type || !strings.HasSuffix(ev.Type, ".delta") {
			names = append(names, ev.Type)
		}
		switch ev.Type {
		case "response.reasoning_text.delta":
			reasoning += ev.Delta
		case "response.function_call_arguments.delta":
			args += ev.Delta
		case "response.completed":
			if err := json.Unmarshal(ev.Response, &final); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := "response.created response.in_progress " +
		"response.output_item.added response.content_part.added response.reasoning_text.delta response.reasoning_text.done response.content_part.done response.output_item.done " +
		"response.output_item.added response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done response.completed"
	if strings.Join(names, " ") != want {
		t.Fatalf("events:\n%s\nwant\n%s", strings.Join(names, " "), want)
	}
	if reasoning != apitest.ToolThinking || args != apitest.ToolArguments {
		t.Fatalf("reasoning %q arguments %q", reasoning, args)
	}
	if final.Status != "completed" || len(final.Output) != 2 || final.Output[1].Name != apitest.ToolName || final.Usage.OutputTokens == 0 {
		t.Fatalf("final %+v", final)
	}

	// Text: the message item's events.
	_, body = ts.post(t, "/v1/responses", `{"model":"scripted","stream":true,"input":"Weather?","reasoning":{"effort":"none"}}`)
	var text string
	names = nil
	for _, chunk := range strings.Split(strings.TrimSpace(string(body)), "\n\n") {
		_, data, _ := strings.Cut(chunk, "\ndata: ")
		var ev struct{ Type, Delta string }
		_ = json.Unmarshal([]byte(data), &ev)
		if ev.Type == "response.output_text.delta" {
			text += ev.Delta
		}
		if n := len(names); n == 0 || names[n-1] != ev.Type {
			names = append(names, ev.Type)
		}
	}
	want = "response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta " +
		"response.output_text.done response.content_part.done response.output_item.done response.completed"
	if text != apitest.PlainReply || strings.Join(names, " ") != want {
		t.Fatalf("text %q events %s", text, strings.Join(names, " "))
	}

	// Cut by max_output_tokens: the last event is response.incomplete, whose response says why.
	_, body = ts.post(t, "/v1/responses", `{"model":"scripted","stream":true,"input":"Weather?","reasoning":{"effort":"none"},"max_output_tokens":2}`)
	chunks := strings.Split(strings.TrimSpace(string(body)), "\n\n")
	_, data, _ := strings.Cut(chunks[len(chunks)-1], "\ndata: ")
	var last struct {
		Type     string
		Response respObject
	}
	if err := json.Unmarshal([]byte(data), &last); err != nil || last.Type != "response.incomplete" || last.Response.Status != "incomplete" ||
		last.Response.IncompleteDetails == nil || last.Response.IncompleteDetails.Reason != "max_output_tokens" {
		t.Fatalf("last event %s", data)
	}
}

func TestResponsesBadInput(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	for _, c := range []struct {
		body   string
		status int
		msg    string
	}{
		{`{"model":"scripted","input":`, 400, "invalid JSON"},
		{`{"model":"nope","input":"hi"}`, 404, "model 'nope' not found"},
		{`{"model":"scripted"}`, 400, "input is required"},
		{`{"model":"scripted","input":42}`, 400, "input must be a string or a list"},
		{`{"model":"scripted","input":[]}`, 400, "input must not be empty"},
		{`{"model":"scripted","input":["hi"]}`, 400, "input[0] must be an input item object"},
		{`{"model":"scripted","input":[{"content":"hi"}]}`, 400, "needs a type"},
		{`{"model":"scripted","input":[{"role":"wizard","content":"hi"}]}`, 400, "role must be"},
		{`{"model":"scripted","input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, 400, "must be a data URL"},
		{`{"model":"scripted","input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,aGk="}]}]}`, 400, "text-only"},
		{`{"model":"scripted","input":[{"role":"user","content":[{"type":"input_video"}]}]}`, 400, `"input_video" is not supported`},
		{`{"model":"scripted","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, 400, "needs a call_id and a name"},
		{`{"model":"scripted","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"[1]"}]}`, 400, "arguments must be a JSON object"},
		{`{"model":"scripted","input":[{"type":"function_call_output","output":"x"}]}`, 400, "needs a call_id"},
		{`{"model":"scripted","input":[{"type":"item_reference","id":"x"}]}`, 400, "item_reference is not supported"},
		{`{"model":"scripted","input":[{"type":"web_search_call","id":"x"}]}`, 400, `"web_search_call" is not supported`},
		{`{"model":"scripted","input":"hi","tools":[{"type":"namespace","name":"ns","tools":[{"type":"function","name":"f","parameters":"x"}]}]}`, 400, "tools[0].tools[0].parameters must be a JSON schema object"},
		{`{"model":"scripted","input":"hi","tools":[{"type":"function"}]}`, 400, "name is required"},
		{`{"model":"scripted","input":"hi","tools":[{"type":"function","name":"f","parameters":"x"}]}`, 400, "parameters must be a JSON schema object"},
		{`{"model":"scripted","input":"hi","instructions":["x"]}`, 400, "instructions must be a string"},
		{`{"model":"scripted","input":"hi","max_output_tokens":0}`, 400, "max_output_tokens must be at least 1"},
		{`{"model":"scripted","input":"hi","text":{"format":{"type":"xml"}}}`, 400, "text.format.type"},
		{`{"model":"scripted","input":"hi","text":{"format":{"type":"json_schema","name":"x"}}}`, 400, "text.format.schema"},
		{`{"model":"scripted","input":"hi","background":true}`, 400, "background responses are not supported"},
		{`{"model":"scripted","input":"hi","conversation":"conv_1"}`, 400, "conversation is not supported"},
		{`{"model":"scripted","input":"hi","truncation":"sometimes"}`, 400, "truncation"},
		{`{"model":"scripted","input":"hi","previous_response_id":"resp_gone"}`, 404, `previous response "resp_gone" not found`},
	} {
		resp, body := ts.post(t, "/v1/responses", c.body)
		var e struct {
			Error struct {
				Message, Type string
				Code          *string
			}
		}
		if resp.StatusCode != c.status || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error.Message, c.msg) || e.Error.Type == "" {
			t.Errorf("%.120s: status %d body %.300s; want %d with %q", c.body, resp.StatusCode, body, c.status, c.msg)
		}
	}
}

func TestResponseStoreBounded(t *testing.T) {
	s := &responseStore{maxItems: 3, maxBytes: 1000}
	for _, id := range []string{"a", "b", "c", "d"} {
		s.put(id, []api.Message{{Role: "user", Content: id}})
	}
	if _, ok := s.get("a"); ok {
		t.Fatal("the oldest response outlived maxItems")
	}
	for _, id := range []string{"b", "c", "d"} {
		if m, ok := s.get(id); !ok || m[0].Content != id {
			t.Fatalf("%s: %v %v", id, m, ok)
		}
	}
	s.put("big", []api.Message{{Role: "user", Content: strings.Repeat("x", 900)}})
	if _, ok := s.get("b"); ok || s.bytes > s.maxBytes {
		t.Fatalf("bytes %d over %d", s.bytes, s.maxBytes)
	}
	s.put("huge", []api.Message{{Role: "user", Content: strings.Repeat("x", 2000)}})
	if _, ok := s.get("huge"); ok {
		t.Fatal("a response larger than the whole budget was kept")
	}
}

// TestResponsesFormat: text.format json_schema constrains the answer (whole and streamed) through the same
// structured-output path as format; a schema it cannot enforce is a 400.
func TestResponsesFormat(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	valid := constraintest.Validator(t, []byte(citySchema))
	format := `"text":{"format":{"type":"json_schema","name":"weather","strict":true,"schema":` + citySchema + `}}`
	resp, b := ts.post(t, "/v1/responses", `{"model":"scripted","input":"Weather?","reasoning":{"effort":"none"},`+format+`}`)
	var r respObject
	if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if err := valid(r.OutputText); err != nil || len(r.Output) != 1 || r.Output[0].Type != "message" {
		t.Fatalf("output %q: %v (%s)", r.OutputText, err, b)
	}
	// Streamed, thinking on: the reasoning item stays free text, the message is JSON of the schema.
	_, b = ts.post(t, "/v1/responses", `{"model":"scripted","stream":true,"input":"Weather in Paris?",`+format+`}`)
	var text, reasoning string
	for _, chunk := range strings.Split(strings.TrimSpace(string(b)), "\n\n") {
		_, data, _ := strings.Cut(chunk, "\ndata: ")
		var ev struct{ Type, Delta string }
		_ = json.Unmarshal([]byte(data), &ev)
		switch ev.Type {
		case "response.output_text.delta":
			text += ev.Delta
		case "response.reasoning_text.delta":
			reasoning += ev.Delta
		}
	}
	if err := valid(text); err != nil || reasoning != apitest.ToolThinking {
		t.Fatalf("streamed text %q (%v), reasoning %q", text, err, reasoning)
	}
	resp, b = ts.post(t, "/v1/responses", `{"model":"scripted","input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":{"type":"object","patternProperties":{}}}}}`)
	if resp.StatusCode != 400 || !strings.Contains(string(b), "patternProperties") || !strings.Contains(string(b), "invalid_request_error") {
		t.Fatalf("unsupported schema: %d %s", resp.StatusCode, b)
	}
}

// TestResponsesClientDisconnect: a client that leaves a streamed response mid-way stops its generation
// (json_object takes the scripted model off its script: a generation that only the context would end).
func TestResponsesClientDisconnect(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	ts.post(t, "/api/generate", `{"model":"scripted"}`) // load
	http.DefaultClient.CloseIdleConnections()
	time.Sleep(50 * time.Millisecond)
	before := runtime.NumGoroutine()

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/responses", strings.NewReader(
		`{"model":"scripted","stream":true,"input":"Weather?","reasoning":{"effort":"none"},"temperature":0,"text":{"format":{"type":"json_object"}}}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	deltas := 0
	for deltas < 20 {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d deltas: %v", deltas, err)
		}
		if strings.HasPrefix(line, "event: response.output_text.delta") {
			deltas++
		}
	}
	cancel()
	resp.Body.Close()

	deadline := time.Now().Add(10 * time.Second)
	for {
		st := ts.srv.sched.Running()
		if len(st) == 1 && st[0].Active == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("generation still holds the model after the client left: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	http.DefaultClient.CloseIdleConnections()
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if resp, body := ts.post(t, "/v1/responses", `{"model":"scripted","input":"Weather?","reasoning":{"effort":"none"}}`); resp.StatusCode != 200 ||
		!strings.Contains(string(body), apitest.PlainReply) {
		t.Fatalf("after disconnect: %d %s", resp.StatusCode, body)
	}
}

// Codex's tools: a namespace's member functions reach the template as namespace.member (as Ollama names
// them), a call to one is answered with the namespace and the member's name (which Codex routes by), and
// a function_call item with a namespace goes back to the template under the qualified name. Hosted tools
// (web_search) and other types the model cannot call are left out, never refused.
func TestResponsesNamespaceTools(t *testing.T) {
	var req openai.ResponsesRequest
	if err := json.Unmarshal([]byte(`{"tools":[
		{"type":"namespace","name":"multi_agent_v1","description":"Agents.","tools":[
			{"type":"function","name":"spawn_agent","description":"Spawn one.","parameters":{"type":"object","properties":{"task":{"type":"string"}},"required":["task"]}},
			{"type":"function","name":"multi_agent_v1.wait","parameters":{"type":"object","properties":{}}}]},
		{"type":"web_search","external_web_access":false},
		{"type":"custom","name":"apply_patch","format":{"type":"grammar"}},
		`+respWeatherTool+`]}`), &req); err != nil {
		t.Fatal(err)
	}
	set, err := responsesTools(req.Tools)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range set.tools {
		names = append(names, tool.Function.Name)
	}
	if strings.Join(names, " ") != "multi_agent_v1.spawn_agent multi_agent_v1.wait get_weather" || strings.Join(set.ignored, " ") != "web_search custom" {
		t.Fatalf("tools %v, ignored %v", names, set.ignored)
	}
	raw, _, _ := toolsJSON(set.tools)
	if !strings.Contains(string(raw[0]), `"required":["task"]`) {
		t.Errorf("the member's schema did not reach the template: %s", raw[0])
	}

	call := api.ToolCall{ID: "call_1", Function: api.ToolCallFunction{Name: "multi_agent_v1.spawn_agent"}}
	item := functionCallItem(call, `{"task":"x"}`, "completed", set.refs)
	if item.Name != "spawn_agent" || item.Namespace != "multi_agent_v1" {
		t.Errorf("namespaced call as %q in %q", item.Name, item.Namespace)
	}
	item = functionCallItem(api.ToolCall{ID: "call_2", Function: api.ToolCallFunction{Name: "get_weather"}}, "{}", "completed", set.refs)
	if item.Name != "get_weather" || item.Namespace != "" {
		t.Errorf("plain call as %q in %q", item.Name, item.Namespace)
	}
	b, _ := json.Marshal(item)
	if strings.Contains(string(b), "namespace") {
		t.Errorf("a plain call carries a namespace: %s", b)
	}

	items, err := openai.InputItems(json.RawMessage(`[{"role":"user","content":"go"},
		{"type":"function_call","call_id":"c1","name":"spawn_agent","namespace":"multi_agent_v1","arguments":"{}"},
		{"type":"function_call_output","call_id":"c1","output":"done"}]`))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := responsesMessages(items, nil)
	if err != nil || len(msgs) != 3 || msgs[1].ToolCalls[0].Function.Name != "multi_agent_v1.spawn_agent" || msgs[2].ToolName != "multi_agent_v1.spawn_agent" {
		t.Fatalf("history %+v, %v", msgs, err)
	}

	ts := newTestServer(t, sched.Config{})
	resp, body := ts.post(t, "/v1/responses", `{"model":"scripted","input":"Weather in Paris?","tools":[
		{"type":"namespace","name":"multi_agent_v1","tools":[{"type":"function","name":"spawn_agent","parameters":{"type":"object"}}]},
		{"type":"web_search"},`+respWeatherTool+`]}`)
	var r respObject
	if resp.StatusCode != 200 || json.Unmarshal(body, &r) != nil || len(r.Output) != 2 || r.Output[1].Name != apitest.ToolName {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}
