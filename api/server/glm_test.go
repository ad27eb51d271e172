package server

import (
	"strings"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/internal/testdata"
)

// glmTemplate renders a conversation as GLM-4.7's chat template lays it out (its public
// model card's format): the tools as JSON lines inside <tools>, an assistant's thinking
// in <think>…</think> before its content, each call as <tool_call>NAME followed by
// <arg_key>/<arg_value> pairs (a string value as it is, any other as JSON), a tool's result
// in <tool_response> after <|observation|>, and the generation prompt "<|assistant|>"
// followed by "<think>" with thinking on (GLM-4.7's) and an empty thinking block with it
// off.
const glmTemplate = `[gMASK]<sop>
{%- if tools -%}<|system|>
# Tools
<tools>
{% for tool in tools %}{{ tool | tojson(ensure_ascii=False) }}
{% endfor %}</tools>
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'user' -%}<|user|>{{ m.content }}
{%- elif m.role == 'assistant' -%}<|assistant|>{{ '<think>' + (m.reasoning_content or '') + '</think>' }}{{ m.content or '' }}
{%- for tc in m.tool_calls or [] -%}{%- set tc = tc.function if tc.function else tc -%}<tool_call>{{ tc.name }}
{%- for k, v in tc.arguments.items() -%}<arg_key>{{ k }}</arg_key><arg_value>{{ v | tojson(ensure_ascii=False) if v is not string else v }}</arg_value>{%- endfor -%}</tool_call>
{%- endfor -%}
{%- elif m.role == 'tool' -%}<|observation|><tool_response>{{ m.content }}</tool_response>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|assistant|>{{ '<think></think>\n\n' if (enable_thinking is defined and not enable_thinking) else '<think>' }}{%- endif -%}`

// TestGLMThroughServer serves a scripted model (Qwen3's tokenizer, in which <think> and
// </think> are single tokens) with a GLM chat template: the prompt opens the thinking
// block, the model thinks and calls a tool in GLM's syntax, and clients get the thinking
// and the tool call with no tag in the content (Ollama's /api/chat, streamed and not;
// OpenAI's chat completions); a call with arguments and its result go back through the
// template on the next turn; with thinking off the model answers in plain text;
// /api/show reports thinking and tools. The scripted model picks each token from the one
// before it, which GLM's <arg_key>/<arg_value> tags (the same tokens, then different ones)
// do not allow: its call has no arguments (text/parser's tests have the arguments).
func TestGLMThroughServer(t *testing.T) {
	tokDir := testdata.Tokenizer(t, "qwen3")
	reply := "Weather needs a tool</think><tool_call>get_weather</tool_call>"
	ts := serveScripted(t, "glm", tokDir, glmTemplate, []apitest.Script{{After: "<think>", Reply: reply}, {After: "\n\n", Reply: "It is sunny."}})
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","description":"Gets the weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}}]`
	checkCall := func(where string, calls []api.ToolCall, content, thinking string) {
		t.Helper()
		if len(calls) != 1 || calls[0].Function.Name != "get_weather" || calls[0].Function.Arguments.String() != `{}` ||
			content != "" || thinking != "Weather needs a tool" {
			t.Errorf("%s: calls %+v, content %q, thinking %q", where, calls, content, thinking)
		}
	}
	var cr api.ChatResponse
	if ts.postJSON(t, "/api/chat", `{"model":"glm","stream":false,"think":true,`+tools+`,"messages":[{"role":"user","content":"Weather in Paris?"}]}`, &cr) != 200 {
		t.Fatal("/api/chat failed")
	}
	checkCall("/api/chat", cr.Message.ToolCalls, cr.Message.Content, cr.Message.Thinking)

	history := `{"role":"user","content":"Weather in Paris?"},{"role":"assistant","thinking":"Weather needs a tool","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris","days":3}}}]},{"role":"tool","tool_name":"get_weather","content":"sunny"}`
	if ts.postJSON(t, "/api/chat", `{"model":"glm","stream":false,"think":true,`+tools+`,"messages":[`+history+`]}`, &cr) != 200 {
		t.Fatal("/api/chat with a tool result failed")
	}
	checkCall("/api/chat after a tool result", cr.Message.ToolCalls, cr.Message.Content, cr.Message.Thinking)

	resp, body := ts.post(t, "/api/chat", `{"model":"glm","think":true,`+tools+`,"messages":[{"role":"user","content":"Weather in Paris?"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("/api/chat streamed: %d %s", resp.StatusCode, body)
	}
	calls, thinking, content := streamedChat(t, body)
	checkCall("/api/chat streamed", calls, content, thinking)

	resp, body = ts.post(t, "/v1/chat/completions", `{"model":"glm","stream":true,`+tools+`,"messages":[{"role":"user","content":"Weather in Paris?"}]}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"name":"get_weather"`) || strings.Contains(string(body), "arg_key") {
		t.Errorf("/v1/chat/completions streamed: %d %s", resp.StatusCode, body)
	}

	if ts.postJSON(t, "/api/chat", `{"model":"glm","stream":false,"think":false,"messages":[{"role":"user","content":"Weather in Paris?"}]}`, &cr) != 200 {
		t.Fatal("/api/chat without thinking failed")
	}
	if cr.Message.Content != "It is sunny." || cr.Message.Thinking != "" || len(cr.Message.ToolCalls) != 0 {
		t.Errorf("thinking off: %+v", cr.Message)
	}

	var show api.ShowResponse
	if ts.postJSON(t, "/api/show", `{"model":"glm"}`, &show) != 200 {
		t.Fatal("/api/show failed")
	}
	caps := strings.Join(show.Capabilities, ",")
	if !strings.Contains(caps, "thinking") || !strings.Contains(caps, "tools") {
		t.Errorf("/api/show capabilities %v, want thinking and tools", show.Capabilities)
	}
}
