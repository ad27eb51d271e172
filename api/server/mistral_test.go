package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/internal/testdata"
)

// mistralTemplate renders a conversation as Mistral's tokenizer v11 lays it out (its public documentation of
// instruct formats and function calling): [AVAILABLE_TOOLS] before the last user turn, [INST]…[/INST] around
// user turns, an assistant's calls as [TOOL_CALLS]name[ARGS]{arguments} and its thinking in [THINK]…[/THINK],
// a tool's result in [TOOL_RESULTS]…[/TOOL_RESULTS]. As the v3 and v7 templates do, it refuses tool-call ids
// that are not nine letters and digits.
const mistralTemplate = `{{- bos_token }}
{%- for m in messages %}
{%- if m.role == "user" %}
{%- if tools and loop.last %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{%- endif %}[INST]{{ m.content }}[/INST]
{%- elif m.role == "assistant" %}
{%- if m.reasoning_content %}[THINK]{{ m.reasoning_content }}[/THINK]{%- endif %}
{{- m.content or "" }}
{%- for c in m.tool_calls or [] %}
{%- if c.id is not defined or c.id | length != 9 %}{{ raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}{%- endif %}
[TOOL_CALLS]{{ c.function.name }}[ARGS]{{ c.function.arguments | tojson }}
{%- endfor %}{{ eos_token }}
{%- elif m.role == "tool" %}
{%- if m.tool_call_id is not defined or m.tool_call_id | length != 9 %}{{ raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}{%- endif %}
[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]
{%- endif %}
{%- endfor %}`

// mistralTokenizer is Qwen3's tokenizer with Mistral's control tokens added as special tokens, as tekken
// has them: the scripted model writes them, and the engine must pass their text on to the parser.
func mistralTokenizer(t *testing.T) string {
	t.Helper()
	src := testdata.Tokenizer(t, "qwen3")
	dir := filepath.Join(t.TempDir(), "tok")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(src, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tok map[string]any
	if err := json.Unmarshal(raw, &tok); err != nil {
		t.Fatal(err)
	}
	added := tok["added_tokens"].([]any)
	next := 0
	for _, a := range added {
		next = max(next, int(a.(map[string]any)["id"].(float64))+1)
	}
	for _, s := range []string{"[INST]", "[/INST]", "[TOOL_CALLS]", "[ARGS]", "[THINK]", "[/THINK]", "[AVAILABLE_TOOLS]",
		"[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"} {
		added = append(added, map[string]any{"id": next, "content": s, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true})
		next++
	}
	tok["added_tokens"] = added
	raw, _ = json.Marshal(tok)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(src, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestMistralThroughServer serves a scripted model with Mistral's control tokens and a Mistral chat template:
// its reply thinks in [THINK]…[/THINK] and calls a tool as [TOOL_CALLS]name[ARGS]{…}, which reach clients as
// thinking and a tool call with no tag in the content (Ollama's /api/chat, whole and streamed; OpenAI's chat
// completions, streamed). The next turn, carrying the call and its result back through a template that
// requires Mistral's nine-character ids, renders. /api/show reports thinking and tools.
func TestMistralThroughServer(t *testing.T) {
	reply := `[THINK]Weather needs a tool[/THINK][TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}`
	ts := serveScripted(t, "mistral", mistralTokenizer(t), mistralTemplate, []apitest.Script{{After: "[/INST]", Reply: reply}})
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","description":"Gets the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	check := func(where string, calls []api.ToolCall, content, thinking string) {
		t.Helper()
		if len(calls) != 1 || calls[0].Function.Name != "get_weather" || calls[0].Function.Arguments.String() != `{"city":"Paris"}` || content != "" || thinking != "Weather needs a tool" {
			t.Errorf("%s: calls %+v, content %q, thinking %q", where, calls, content, thinking)
		}
	}
	var cr api.ChatResponse
	if ts.postJSON(t, "/api/chat", `{"model":"mistral","stream":false,`+tools+`,"messages":[{"role":"user","content":"Weather in Paris?"}]}`, &cr) != 200 {
		t.Fatal("/api/chat failed")
	}
	check("/api/chat", cr.Message.ToolCalls, cr.Message.Content, cr.Message.Thinking)

	// The next turn: the call with the id mlxg gave it, then one without an id, and the tools' results.
	id := cr.Message.ToolCalls[0].ID
	history := `{"role":"user","content":"Weather in Paris?"},{"role":"assistant","thinking":"Need the tool.","tool_calls":[{"id":"` + id + `","function":{"name":"get_weather","arguments":{"city":"Paris"}}},{"function":{"name":"get_weather","arguments":{"city":"Oslo"}}}]},` +
		`{"role":"tool","tool_call_id":"` + id + `","content":"sunny"},{"role":"tool","content":"rain"},{"role":"user","content":"And tomorrow?"}`
	if ts.postJSON(t, "/api/chat", `{"model":"mistral","stream":false,`+tools+`,"messages":[`+history+`]}`, &cr) != 200 {
		t.Fatal("/api/chat with tool results failed")
	}
	check("/api/chat after tool results", cr.Message.ToolCalls, cr.Message.Content, cr.Message.Thinking)

	resp, body := ts.post(t, "/api/chat", `{"model":"mistral",`+tools+`,"messages":[{"role":"user","content":"Weather in Paris?"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("/api/chat streamed: %d %s", resp.StatusCode, body)
	}
	calls, thinking, content := streamedChat(t, body)
	check("/api/chat streamed", calls, content, thinking)

	resp, body = ts.post(t, "/v1/chat/completions", `{"model":"mistral","stream":true,`+tools+`,"messages":[{"role":"user","content":"Weather in Paris?"}]}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"name":"get_weather"`) || strings.Contains(string(body), "[TOOL_CALLS]") || strings.Contains(string(body), "[THINK]") {
		t.Errorf("/v1/chat/completions streamed: %d %s", resp.StatusCode, body)
	}

	// A forced call: after the thinking, the constraint writes [TOOL_CALLS] and one {"name", "arguments"} object.
	forced := `"tools":[{"type":"function","function":{"name":"get_weather","description":"Gets the weather","parameters":{"type":"object","properties":{"city":{"const":"Rome"}},"required":["city"],"additionalProperties":false}}}]`
	resp, body = ts.post(t, "/v1/chat/completions", `{"model":"mistral","max_tokens":80,"tool_choice":{"type":"function","function":{"name":"get_weather"}},`+forced+`,"messages":[{"role":"user","content":"Weather?"}]}`)
	var out struct {
		Choices []struct {
			Message struct {
				Content   string `json:"content"`
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
	if m := out.Choices[0].Message; len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "get_weather" || m.ToolCalls[0].Function.Arguments != `{"city":"Rome"}` || m.Content != "" {
		t.Errorf("forced tool: %s", body)
	}

	var show api.ShowResponse
	if ts.postJSON(t, "/api/show", `{"model":"mistral"}`, &show) != 200 {
		t.Fatal("/api/show failed")
	}
	if caps := strings.Join(show.Capabilities, ","); !strings.Contains(caps, "thinking") || !strings.Contains(caps, "tools") {
		t.Errorf("/api/show capabilities %v, want thinking and tools", show.Capabilities)
	}
}
