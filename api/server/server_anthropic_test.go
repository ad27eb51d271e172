package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/anthropic"
	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/runner/sched"
)

const anthWeatherTool = `{"name":"get_weather","description":"Current weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}`

type anthReply struct {
	ID, Type, Role, Model string
	Content               []struct {
		Type, Text, Thinking, ID, Name string
		Signature                      *string
		Input                          json.RawMessage
	}
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
	}
}

// postHeaders posts with extra headers.
func (ts *testServer) postHeaders(t *testing.T, path, body string, headers map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp, []byte(b.String())
}

func TestAnthropicMessages(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	hdr := map[string]string{"x-api-key": "ignored", "anthropic-version": "2023-06-01"}
	post := func(body string) anthReply {
		t.Helper()
		resp, b := ts.postHeaders(t, "/v1/messages", body, hdr)
		var r anthReply
		if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		if r.Type != "message" || r.Role != "assistant" || !strings.HasPrefix(r.ID, "msg_") || r.Model != "scripted" ||
			r.Usage.InputTokens == 0 || r.Usage.OutputTokens == 0 {
			t.Fatalf("reply %s", b)
		}
		return r
	}

	// Thinking on (the model's default): a thinking block and a tool_use block.
	r := post(`{"model":"scripted","max_tokens":100,"system":[{"type":"text","text":"Be brief."}],
		"messages":[{"role":"user","content":"Weather in Paris?"}],"tools":[` + anthWeatherTool + `]}`)
	if *r.StopReason != "tool_use" || r.StopSequence != nil || len(r.Content) != 2 ||
		r.Content[0].Type != "thinking" || r.Content[0].Thinking != apitest.ToolThinking || r.Content[0].Signature == nil ||
		r.Content[1].Type != "tool_use" || r.Content[1].Name != apitest.ToolName || string(r.Content[1].Input) != apitest.ToolArguments ||
		!strings.HasPrefix(r.Content[1].ID, "toolu_") {
		t.Fatalf("tool call reply %+v", r)
	}

	// The tool round trip, thinking off: the tool_result reaches the template, the model answers in text.
	round := `{"model":"scripted","max_tokens":100,"thinking":{"type":"disabled"},"tools":[` + anthWeatherTool + `],"messages":[
		{"role":"user","content":"Weather in Paris?"},
		{"role":"assistant","content":[{"type":"thinking","thinking":"` + apitest.ToolThinking + `","signature":"x"},
			{"type":"tool_use","id":"` + r.Content[1].ID + `","name":"get_weather","input":{"city":"Paris"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + r.Content[1].ID + `","content":[{"type":"text","text":"sunny"}]},
			{"type":"text","text":"And so?","cache_control":{"type":"ephemeral"}}]}]}`
	r = post(round)
	if *r.StopReason != "end_turn" || len(r.Content) != 1 || r.Content[0].Type != "text" || r.Content[0].Text != apitest.PlainReply {
		t.Fatalf("after the tool result %+v", r)
	}

	// max_tokens ends with max_tokens; a stop sequence with stop_sequence and the text before it.
	r = post(`{"model":"scripted","max_tokens":2,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"Weather?"}]}`)
	if *r.StopReason != "max_tokens" || r.Usage.OutputTokens != 2 {
		t.Fatalf("max_tokens %+v", r)
	}
	r = post(`{"model":"scripted","max_tokens":50,"stop_sequences":["never","sunny"],"thinking":{"type":"disabled"},
		"messages":[{"role":"user","content":[{"type":"text","text":"Weather?"}]}]}`)
	if *r.StopReason != "stop_sequence" || r.StopSequence == nil || *r.StopSequence != "sunny" ||
		r.Content[0].Text != strings.TrimSuffix(apitest.PlainReply, "sunny.") {
		t.Fatalf("stop sequence %+v", r)
	}
}

// anthEvent is one parsed SSE event of a Messages stream.
type anthEvent struct {
	name string
	data map[string]any
}

func anthEvents(t *testing.T, body []byte) []anthEvent {
	t.Helper()
	var out []anthEvent
	for _, chunk := range strings.Split(strings.TrimSpace(string(body)), "\n\n") {
		name, data, ok := strings.Cut(chunk, "\ndata: ")
		if !ok || !strings.HasPrefix(name, "event: ") {
			t.Fatalf("not an SSE event: %q", chunk)
		}
		var ev anthEvent
		ev.name = strings.TrimPrefix(name, "event: ")
		if err := json.Unmarshal([]byte(data), &ev.data); err != nil {
			t.Fatalf("event %q: %v", chunk, err)
		}
		if ev.data["type"] != ev.name {
			t.Fatalf("event %q carries type %v", ev.name, ev.data["type"])
		}
		out = append(out, ev)
	}
	return out
}

func TestAnthropicStream(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	resp, body := ts.post(t, "/v1/messages", `{"model":"scripted","max_tokens":100,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},
		"messages":[{"role":"user","content":"Weather in Paris?"}],"tools":[`+anthWeatherTool+`]}`)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	events := anthEvents(t, body)
	var names []string
	var thinking, args strings.Builder
	var toolName string
	for _, ev := range events {
		if n := len(names); n == 0 || names[n-1] != ev.name || ev.name != "content_block_delta" {
			names = append(names, ev.name)
		}
		switch ev.name {
		case "content_block_start":
			if b := ev.data["content_block"].(map[string]any); b["type"] == "tool_use" {
				toolName = b["name"].(string)
			}
		case "content_block_delta":
			d := ev.data["delta"].(map[string]any)
			switch d["type"] {
			case "thinking_delta":
				thinking.WriteString(d["thinking"].(string))
			case "input_json_delta":
				args.WriteString(d["partial_json"].(string))
			default:
				t.Fatalf("unexpected delta %v", d)
			}
		}
	}
	want := "message_start ping content_block_start content_block_delta content_block_stop content_block_start content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(names, " ") != want {
		t.Fatalf("events %v\nwant %s", names, want)
	}
	if thinking.String() != apitest.ToolThinking || toolName != apitest.ToolName || args.String() != apitest.ToolArguments {
		t.Fatalf("thinking %q call %s(%s)", thinking.String(), toolName, args.String())
	}
	if events[2].data["index"].(float64) != 0 || events[len(events)-4].data["index"].(float64) != 1 {
		t.Fatalf("block indexes: %v, %v", events[2].data, events[len(events)-4].data)
	}
	md := events[len(events)-2].data
	usage := md["usage"].(map[string]any)
	if md["delta"].(map[string]any)["stop_reason"] != "tool_use" || usage["input_tokens"].(float64) == 0 || usage["output_tokens"].(float64) == 0 {
		t.Fatalf("message_delta %v", md)
	}

	// Text only, thinking off.
	_, body = ts.post(t, "/v1/messages", `{"model":"scripted","max_tokens":100,"stream":true,"thinking":{"type":"disabled"},
		"messages":[{"role":"user","content":"Weather?"}]}`)
	var text strings.Builder
	for _, ev := range anthEvents(t, body) {
		if ev.name == "content_block_delta" {
			text.WriteString(ev.data["delta"].(map[string]any)["text"].(string))
		}
		if ev.name == "message_delta" && ev.data["delta"].(map[string]any)["stop_reason"] != "end_turn" {
			t.Fatalf("message_delta %v", ev.data)
		}
	}
	if text.String() != apitest.PlainReply {
		t.Fatalf("text %q", text.String())
	}
}

func TestAnthropicBadInput(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	user := `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		body   string
		status int
		typ    string
		msg    string
	}{
		{`{"model":"scripted","max_tokens":`, 400, "invalid_request_error", "invalid JSON"},
		{``, 400, "invalid_request_error", "missing request body"},
		{`{"model":"nope","max_tokens":10,` + user + `}`, 404, "not_found_error", "model 'nope' not found"},
		{`{"max_tokens":10,` + user + `}`, 400, "invalid_request_error", "model is required"},
		{`{"model":"scripted",` + user + `}`, 400, "invalid_request_error", "max_tokens is required"},
		{`{"model":"scripted","max_tokens":0,` + user + `}`, 400, "invalid_request_error", "max_tokens must be at least 1"},
		{`{"model":"scripted","max_tokens":10,"messages":[]}`, 400, "invalid_request_error", "messages must not be empty"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"tool","content":"hi"}]}`, 400, "invalid_request_error", `role must be "user", "assistant" or "system"`},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"system","content":[{"type":"image"}]}]}`, 400, "invalid_request_error", "messages[1].content[0]: block type"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"user"}]}`, 400, "invalid_request_error", "messages[0].content is required"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"user","content":42}]}`, 400, "invalid_request_error", "must be a string or a list of content blocks"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"user","content":[]}]}`, 400, "invalid_request_error", "must not be empty"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"user","content":["hi"]}]}`, 400, "invalid_request_error", "content[0] must be a content block object"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"user","content":[{"text":"hi"}]}]}`, 400, "invalid_request_error", "needs a type"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"aGk="}}]}]}`, 400, "invalid_request_error", "text-only"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"user","content":[{"type":"server_tool_use","id":"x"}]}]}`, 400, "invalid_request_error", `"server_tool_use" is not supported`},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]}]}`, 400, "invalid_request_error", "need an id and a name"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":[1]}]}]}`, 400, "invalid_request_error", "input must be a JSON object"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}]}`, 400, "invalid_request_error", "belong in user messages"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]}`, 400, "invalid_request_error", "belong in assistant messages"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, 400, "invalid_request_error", "need a tool_use_id"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":{"a":1}}]}]}`, 400, "invalid_request_error", "tool_result.content must be"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image"}]}]}]}`, 400, "invalid_request_error", "image block needs a source"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"base64","data":"aGk="}}]}]}]}`, 400, "invalid_request_error", "text-only"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x/a.png"}}]}]}`, 400, "invalid_request_error", "not fetched"},
		{`{"model":"scripted","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","data":"%%%"}}]}]}`, 400, "invalid_request_error", "not valid base64"},
		{`{"model":"scripted","max_tokens":10,"system":[{"type":"image"}],` + user + `}`, 400, "invalid_request_error", "system[0]"},
		{`{"model":"scripted","max_tokens":10,"system":7,` + user + `}`, 400, "invalid_request_error", "system must be"},
		{`{"model":"scripted","max_tokens":10,"tools":[{"input_schema":{}}],` + user + `}`, 400, "invalid_request_error", "name is required"},
		{`{"model":"scripted","max_tokens":10,"tools":[{"name":"f","input_schema":"object"}],` + user + `}`, 400, "invalid_request_error", "input_schema must be"},
		{`{"model":"scripted","max_tokens":10,"tool_choice":{"type":"sometimes"},` + user + `}`, 400, "invalid_request_error", "tool_choice.type"},
		{`{"model":"scripted","max_tokens":10,"thinking":{"type":"maybe"},` + user + `}`, 400, "invalid_request_error", "thinking.type"},
		{`{"model":"scripted","max_tokens":10,"stop_sequences":"x",` + user + `}`, 400, "invalid_request_error", `"stop_sequences" must be of type []string`},
		{`{"model":"scripted","max_tokens":10,"stop_sequences":[""],` + user + `}`, 400, "invalid_request_error", "stop_sequences[0]"},
		{`{"model":"scripted","max_tokens":10,"temperature":-1,` + user + `}`, 400, "invalid_request_error", "temperature"},
	} {
		resp, body := ts.post(t, "/v1/messages", c.body)
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if resp.StatusCode != c.status || json.Unmarshal(body, &e) != nil || e.Type != "error" || e.Error.Type != c.typ || !strings.Contains(e.Error.Message, c.msg) {
			t.Errorf("%.120s: status %d body %.300s; want %d %s with %q", c.body, resp.StatusCode, body, c.status, c.typ, c.msg)
		}
	}
	// Unknown /v1 routes answer in OpenAI's shape, unknown /v1/messages routes in Anthropic's.
	for path, want := range map[string]string{"/v1/nope": `{"error":{"message":"404 page not found","type":"not_found_error","param":null,"code":null}}`,
		"/v1/messages/nope": `{"type":"error","error":{"type":"not_found_error","message":"404 page not found"}}`} {
		resp, body := ts.post(t, path, `{}`)
		if resp.StatusCode != 404 || string(body) != want {
			t.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
}

// A system turn inside messages (Claude Code sends them for models not named Claude) is a system message
// where it stands, its content a string or text blocks; the request is answered.
func TestAnthropicSystemTurns(t *testing.T) {
	msgs := []anthropic.MessageParam{
		{Role: "user", Content: json.RawMessage(`"hi"`)},
		{Role: "system", Content: json.RawMessage(`[{"type":"text","text":"Be brief."},{"type":"text","text":"Use tools.","cache_control":{"type":"ephemeral"}}]`)},
		{Role: "assistant", Content: json.RawMessage(`"hello"`)},
		{Role: "system", Content: json.RawMessage(`"Late."`)},
		{Role: "user", Content: json.RawMessage(`"weather?"`)},
	}
	got, err := anthropicMessages(json.RawMessage(`"Top."`), msgs)
	if err != nil {
		t.Fatal(err)
	}
	want := []api.Message{{Role: "system", Content: "Top."}, {Role: "user", Content: "hi"},
		{Role: "system", Content: "Be brief.\n\nUse tools."}, {Role: "assistant", Content: "hello"},
		{Role: "system", Content: "Late."}, {Role: "user", Content: "weather?"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i].Role != want[i].Role || got[i].Content != want[i].Content {
			t.Errorf("message %d = %+v, want %+v", i, got[i], want[i])
		}
	}

	ts := newTestServer(t, sched.Config{})
	resp, b := ts.post(t, "/v1/messages", `{"model":"scripted","max_tokens":50,"thinking":{"type":"disabled"},"messages":[
		{"role":"user","content":"hi"},{"role":"system","content":[{"type":"text","text":"Be brief."}]},
		{"role":"user","content":"Weather?"}]}`)
	var r anthReply
	if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil || len(r.Content) != 1 || r.Content[0].Text != apitest.PlainReply {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
}
