package server

import (
	"encoding/json"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/openai"
	"github.com/mlxg/mlxg/text/template"
)

// A tool schema and tool-call arguments reach the chat template with the client's key order
// and number kinds (1.0 stays a float, 2 an int), as transformers renders them, for /api/chat
// and /v1/chat/completions.
func TestToolsKeepOrderInTemplate(t *testing.T) {
	const fn = `{"name":"get_weather","parameters":{"type":"object","required":["city"],"properties":{"zeta":{"type":"number","default":1.0,"items":{"b":1,"a":2}},"city":{"type":"string","description":"a city"}}},"description":"weather"}`
	const args = `{"zeta":1.0,"city":{"name":"Paris","country":"FR"},"n":2}`
	tmpl, err := template.Parse("t", `{% for t in tools %}{{ t | tojson }}{% endfor %}|{% for m in messages %}{% for c in m.tool_calls %}{{ c.function.arguments | tojson }}{% endfor %}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "required": ["city"], "properties": {"zeta": {"type": "number", "default": 1.0, "items": {"b": 1, "a": 2}}, "city": {"type": "string", "description": "a city"}}}, "description": "weather"}}` +
		`|{"zeta": 1.0, "city": {"name": "Paris", "country": "FR"}, "n": 2}`
	render := func(t *testing.T, tools api.Tools, msgs []api.Message) string {
		t.Helper()
		raw, _, err := toolsJSON(tools)
		if err != nil {
			t.Fatal(err)
		}
		tm := templateMessages(msgs)
		ms := make([]any, len(tm))
		for i := range tm {
			ms[i] = tm[i]
		}
		ts := make([]any, len(raw))
		for i := range raw {
			ts[i] = raw[i]
		}
		out, err := tmpl.Render(map[string]any{"tools": ts, "messages": ms})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	t.Run("api/chat", func(t *testing.T) {
		var req api.ChatRequest
		body := `{"model":"m","tools":[{"type":"function","function":` + fn + `}],"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"get_weather","arguments":` + args + `}}]}]}`
		if err := json.Unmarshal([]byte(body), &req); err != nil {
			t.Fatal(err)
		}
		if got := render(t, req.Tools, req.Messages); got != want {
			t.Errorf("rendered\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("v1/chat/completions", func(t *testing.T) {
		var req openai.ChatCompletionRequest
		argsStr, _ := json.Marshal(args)
		body := `{"model":"m","tools":[{"type":"function","function":` + fn + `}],"messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":` + string(argsStr) + `}}]}]}`
		if err := json.Unmarshal([]byte(body), &req); err != nil {
			t.Fatal(err)
		}
		tools, err := oaiTools(req.Tools)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := oaiMessages(req.Messages)
		if err != nil {
			t.Fatal(err)
		}
		if got := render(t, tools, msgs); got != want {
			t.Errorf("rendered\n%s\nwant\n%s", got, want)
		}
	})
}
