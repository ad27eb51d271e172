package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/sched"
	"github.com/mlxg/mlxg/text/constrain/constraintest"
)

// The tools of TestToolChoiceEnforced, with $defs and a $ref, which the tool-call schema rebases.
const (
	tcWeatherParams = `{"type":"object","properties":{"city":{"type":"string","maxLength":20},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"],"additionalProperties":false}`
	tcTimeParams    = `{"type":"object","$defs":{"zone":{"enum":["UTC","CET","PST"]}},"properties":{"zone":{"$ref":"#/$defs/zone"}},"required":["zone"]}`
)

// tool_choice "required" or a named function forces a tool call on qwen3-tiny, on every route: the reply
// is one parsed call, of the named tool when one is named, whose arguments are valid against its schema;
// "none" takes the tools away; a name that is no tool is a 400.
func TestToolChoiceEnforced(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	n, _ := registry.ParseName("qwen3-tiny")
	if _, err := ts.srv.cfg.Store.ImportDir(context.Background(), n, testdata.SharedModel(t, "qwen3-tiny")); err != nil {
		t.Fatal(err)
	}
	valid := map[string]func(string) error{
		"get_weather": constraintest.Validator(t, []byte(tcWeatherParams)),
		"get_time":    constraintest.Validator(t, []byte(tcTimeParams)),
	}
	check := func(route, name, args, want string) {
		t.Helper()
		v, ok := valid[name]
		switch {
		case !ok:
			t.Errorf("%s: a call to %q", route, name)
		case want != "" && name != want:
			t.Errorf("%s: a call to %q, want %q", route, name, want)
		default:
			if err := v(args); err != nil {
				t.Errorf("%s: %s(%s): %v", route, name, args, err)
			}
		}
	}
	oaiTools := `[{"type":"function","function":{"name":"get_weather","description":"Weather forecast","parameters":` + tcWeatherParams + `}},` +
		`{"type":"function","function":{"name":"get_time","description":"Current time","parameters":` + tcTimeParams + `}}]`
	user := `"messages":[{"role":"user","content":"Hello there"}]`

	// Chat completions: required (thinking off, then on), a named function, streamed.
	for _, c := range []struct{ choice, extra, want string }{
		{`"required"`, `"reasoning_effort":"none",`, ""},
		{`"required"`, `"max_tokens":400,`, ""},
		{`{"type":"function","function":{"name":"get_time"}}`, `"reasoning_effort":"none",`, "get_time"},
	} {
		var r struct {
			Choices []struct {
				Message struct {
					ToolCalls []struct {
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				}
				FinishReason string `json:"finish_reason"`
			}
		}
		body := `{"model":"qwen3-tiny","temperature":0,` + c.extra + `"tool_choice":` + c.choice + `,"tools":` + oaiTools + `,` + user + `}`
		if code := ts.postJSON(t, "/v1/chat/completions", body, &r); code != 200 || len(r.Choices) != 1 ||
			len(r.Choices[0].Message.ToolCalls) != 1 || r.Choices[0].FinishReason != "tool_calls" {
			t.Fatalf("%s: %d %+v", body, code, r)
		}
		call := r.Choices[0].Message.ToolCalls[0].Function
		check("chat "+c.choice, call.Name, call.Arguments, c.want)
	}
	resp, b := ts.post(t, "/v1/chat/completions", `{"model":"qwen3-tiny","stream":true,"temperature":0,"reasoning_effort":"none","tool_choice":"required","tools":`+oaiTools+`,`+user+`}`)
	var name, args string
	for _, line := range strings.Split(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					ToolCalls []struct {
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				}
			}
		}
		_ = json.Unmarshal([]byte(data), &ch)
		for _, c := range ch.Choices {
			for _, tc := range c.Delta.ToolCalls {
				name += tc.Function.Name
				args += tc.Function.Arguments
			}
		}
	}
	if resp.StatusCode != 200 || name == "" {
		t.Fatalf("streamed: %d %s", resp.StatusCode, b)
	}
	check("chat streamed", name, args, "")

	// Responses: required, and a named function.
	respTools := `[{"type":"function","name":"get_weather","parameters":` + tcWeatherParams + `},{"type":"function","name":"get_time","parameters":` + tcTimeParams + `}]`
	for _, c := range []struct{ choice, want string }{{`"required"`, ""}, {`{"type":"function","name":"get_weather"}`, "get_weather"}} {
		var r respObject
		body := `{"model":"qwen3-tiny","temperature":0,"reasoning":{"effort":"none"},"input":"Hello there","tool_choice":` + c.choice + `,"tools":` + respTools + `}`
		if code := ts.postJSON(t, "/v1/responses", body, &r); code != 200 || r.Status != "completed" || len(r.Output) != 1 || r.Output[0].Type != "function_call" {
			t.Fatalf("%s: %d %+v", body, code, r)
		}
		check("responses "+c.choice, r.Output[0].Name, r.Output[0].Arguments, c.want)
	}

	// A namespace's member, named with its namespace as Codex names it: the call comes back the same way.
	var nr respObject
	body := `{"model":"qwen3-tiny","temperature":0,"reasoning":{"effort":"none"},"input":"Hello there",` +
		`"tool_choice":{"type":"function","name":"get_time","namespace":"clock"},"tools":[{"type":"namespace","name":"clock","tools":` + respTools + `}]}`
	if code := ts.postJSON(t, "/v1/responses", body, &nr); code != 200 || len(nr.Output) != 1 || nr.Output[0].Type != "function_call" ||
		nr.Output[0].Namespace != "clock" {
		t.Fatalf("%s: %d %+v", body, code, nr)
	}
	check("responses namespaced", nr.Output[0].Name, nr.Output[0].Arguments, "get_time")

	// Messages: any, and a named tool.
	anthTools := `[{"name":"get_weather","input_schema":` + tcWeatherParams + `},{"name":"get_time","input_schema":` + tcTimeParams + `}]`
	for _, c := range []struct{ choice, want string }{{`{"type":"any"}`, ""}, {`{"type":"tool","name":"get_time"}`, "get_time"}} {
		var r anthReply
		body := `{"model":"qwen3-tiny","max_tokens":200,"temperature":0,"thinking":{"type":"disabled"},"tool_choice":` + c.choice + `,"tools":` + anthTools + `,` + user + `}`
		if code := ts.postJSON(t, "/v1/messages", body, &r); code != 200 || *r.StopReason != "tool_use" || len(r.Content) != 1 || r.Content[0].Type != "tool_use" {
			t.Fatalf("%s: %d %+v", body, code, r)
		}
		check("messages "+c.choice, r.Content[0].Name, string(r.Content[0].Input), c.want)
	}

	// none: no tools reach the template, so no call; a name that is no tool is refused.
	var r struct {
		Choices []struct {
			Message struct {
				ToolCalls []any `json:"tool_calls"`
			}
		}
	}
	if code := ts.postJSON(t, "/v1/chat/completions", `{"model":"qwen3-tiny","max_tokens":20,"temperature":0,"reasoning_effort":"none","tool_choice":"none","tools":`+oaiTools+`,`+user+`}`, &r); code != 200 || len(r.Choices[0].Message.ToolCalls) != 0 {
		t.Fatalf("none: %d %+v", code, r)
	}
	for path, body := range map[string]string{
		"/v1/chat/completions": `{"model":"qwen3-tiny","tool_choice":{"type":"function","function":{"name":"nope"}},"tools":` + oaiTools + `,` + user + `}`,
		"/v1/responses":        `{"model":"qwen3-tiny","input":"hi","tool_choice":{"type":"function","name":"nope"},"tools":` + respTools + `}`,
		"/v1/messages":         `{"model":"qwen3-tiny","max_tokens":9,"tool_choice":{"type":"tool","name":"nope"},"tools":` + anthTools + `,` + user + `}`,
	} {
		if resp, b := ts.post(t, path, body); resp.StatusCode != 400 || !strings.Contains(string(b), `\"nope\", which is not among the tools`) {
			t.Errorf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
}

// rebaseRefs moves a schema's local references under the pointer it is placed at, keeping key order and
// leaving other strings alone.
func TestRebaseRefs(t *testing.T) {
	got, err := rebaseRefs([]byte(`{"b":{"$ref":"#/$defs/x"},"a":[{"$ref":"#"},{"const":"#/$defs/x"}],"$defs":{"x":{"type":"integer","minimum":1.50}}}`), "#/anyOf/1/properties/arguments")
	want := `{"b":{"$ref":"#/anyOf/1/properties/arguments/$defs/x"},"a":[{"$ref":"#/anyOf/1/properties/arguments"},{"const":"#/$defs/x"}],"$defs":{"x":{"type":"integer","minimum":1.50}}}`
	if err != nil || string(got) != want {
		t.Fatalf("got %s (%v)\nwant %s", got, err, want)
	}
}
