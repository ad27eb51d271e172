package parser

import (
	"strings"
	"testing"
)

// Mistral's transcripts, written from Mistral's documentation of its tokenizer versions (function calling
// with v3/v7's JSON list and v11's name[ARGS]arguments form) and of Magistral's reasoning ([THINK] blocks).
var mistralThink = Config{Thinking: true, ThinkOpen: MistralThinkOpen, ThinkClose: MistralThinkClose}

func init() {
	thinkTools := mistralThink
	thinkTools.Tools = ToolsMistral
	cases = append(cases,
		parseCase{name: "mistral v11 call", cfg: Config{Tools: ToolsMistral},
			in:    `[TOOL_CALLS]get_current_weather[ARGS]{"location": "Paris, France", "format": "celsius"}`,
			calls: []ToolCall{call("get_current_weather", `{"location":"Paris, France","format":"celsius"}`)}},
		parseCase{name: "mistral v11 text then two calls", cfg: Config{Tools: ToolsMistral},
			in:      "Let me check both.\n[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}",
			content: "Let me check both.", calls: []ToolCall{call("get_weather", `{"city":"Paris"}`), call("get_time", `{}`)}},
		parseCase{name: "mistral call id", cfg: Config{Tools: ToolsMistral},
			in: `[TOOL_CALLS]add[CALL_ID]a1b2c3d4e[ARGS]{"a": 1, "b": [2, "]"]}`, calls: []ToolCall{call("add", `{"a":1,"b":[2,"]"]}`)}},
		parseCase{name: "mistral json list", cfg: Config{Tools: ToolsMistral},
			in:    `[TOOL_CALLS] [{"name": "get_current_weather", "arguments": {"location": "Paris"}}, {"name": "get_time", "arguments": {}, "id": "9Ae3bDc2F"}]`,
			calls: []ToolCall{call("get_current_weather", `{"location":"Paris"}`), call("get_time", `{}`)}},
		parseCase{name: "mistral malformed is text", cfg: Config{Tools: ToolsMistral},
			in: "Sure. [TOOL_CALLS]f[ARGS]{oops", content: "Sure. [TOOL_CALLS]f[ARGS]{oops"},
		parseCase{name: "mistral no args is text", cfg: Config{Tools: ToolsMistral},
			in: "[TOOL_CALLS]just words", content: "[TOOL_CALLS]just words"},
		parseCase{name: "mistral prose after args is text", cfg: Config{Tools: ToolsMistral},
			in: "[TOOL_CALLS]f[ARGS]{} and more", content: "[TOOL_CALLS]f[ARGS]{} and more"},
		parseCase{name: "mistral bad second call keeps the first", cfg: Config{Tools: ToolsMistral},
			in: "[TOOL_CALLS]f[ARGS]{}\n[TOOL_CALLS]g[ARGS]nope", content: "[TOOL_CALLS]g[ARGS]nope", calls: []ToolCall{call("f", `{}`)}},
		parseCase{name: "mistral partial tag at end", cfg: Config{Tools: ToolsMistral}, in: "see [TOOL_CA", content: "see [TOOL_CA"},
		parseCase{name: "mistral tag without tools is text", cfg: Config{}, in: "[TOOL_CALLS]f[ARGS]{}", content: "[TOOL_CALLS]f[ARGS]{}"},
		parseCase{name: "magistral think", cfg: mistralThink,
			in: "[THINK]Two plus two.\nThat is 4.[/THINK]\n\nThe answer is **4**.", thinking: "Two plus two.\nThat is 4.", content: "The answer is **4**."},
		parseCase{name: "magistral no think block", cfg: mistralThink, in: "Hello <think>", content: "Hello <think>"},
		parseCase{name: "magistral think then call", cfg: thinkTools,
			in:       "[THINK]I need the weather.[/THINK][TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}",
			thinking: "I need the weather.", calls: []ToolCall{call("get_weather", `{"city":"Oslo"}`)}},
	)
}

func TestDetectMistral(t *testing.T) {
	small32 := `{%- for message in loop_messages %}{%- if message["role"] == "user" %}{{- "[INST]" + message["content"] + "[/INST]" }}` +
		`{%- elif message.tool_calls is defined %}{%- for tool in message.tool_calls %}{{- "[TOOL_CALLS]" + tool.function.name + "[ARGS]" + tool.function.arguments|tojson }}{%- endfor %}{{- eos_token }}{%- endif %}{%- endfor %}`
	c := Detect(small32)
	if c.Tools != ToolsMistral || c.Thinking || !c.SpecialTags {
		t.Errorf("Mistral Small 3.2's template: %+v", c)
	}
	magistral := `{%- if message["role"] == "assistant" %}{%- for chunk in message.content %}{%- if chunk.type == "thinking" %}{{- "[THINK]" + chunk.thinking + "[/THINK]" }}{%- endif %}{%- endfor %}{%- endif %}{{- "[TOOL_CALLS]" }}`
	c = Detect(magistral)
	if c.Tools != ToolsMistral || !c.Thinking || c.ThinkOpen != MistralThinkOpen || c.ThinkClose != MistralThinkClose {
		t.Errorf("Magistral's template: %+v", c)
	}
	if c := Detect(`{{ "<think>" }}<tool_call>`); c.SpecialTags || c.Tools != ToolsHermes {
		t.Errorf("Qwen's template: %+v", c)
	} else if open, close := c.ThinkTags(); open != ThinkOpen || close != ThinkClose {
		t.Errorf("Qwen's template: %+v", c)
	}
	if !PromptOpens("[INST]hi[/INST][THINK]\n", MistralThinkOpen) || PromptOpens("[INST]hi[/INST]", MistralThinkOpen) {
		t.Error("PromptOpens with Mistral's tag")
	}
}

func TestMistralCallIDs(t *testing.T) {
	msgs := []map[string]any{
		{"role": "user", "content": "weather in Paris and Oslo?"},
		{"role": "assistant", "tool_calls": []any{
			map[string]any{"id": "call_0123abcd", "function": map[string]any{"name": "w"}},
			map[string]any{"function": map[string]any{"name": "w"}},
		}},
		{"role": "tool", "content": "20C", "tool_call_id": "call_0123abcd"},
		{"role": "tool", "content": "5C"},
	}
	MistralCallIDs(msgs)
	calls := msgs[1]["tool_calls"].([]any)
	a, b := calls[0].(map[string]any)["id"].(string), calls[1].(map[string]any)["id"].(string)
	for _, id := range []string{a, b} {
		if len(id) != 9 || strings.Trim(id, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
			t.Fatalf("id %q is not nine letters and digits", id)
		}
	}
	if a == b || msgs[2]["tool_call_id"] != a || msgs[3]["tool_call_id"] != b {
		t.Fatalf("ids %q %q, results %v %v", a, b, msgs[2]["tool_call_id"], msgs[3]["tool_call_id"])
	}
	if mistralID("call_0123abcd") != a {
		t.Fatal("the same id maps to another on a later turn")
	}
}
