package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/runner/sched"
	"github.com/mlxg/mlxg/text/constrain/constraintest"
)

const citySchema = `{"type":"object","properties":{"city":{"enum":["Paris","Rome"]},"sunny":{"type":"boolean"}},"required":["city","sunny"],"additionalProperties":false}`

// TestFormat: format and response_format constrain the answer on every route; the scripted model's
// thinking stays free, and its answer (which would be a tool call or plain text) becomes JSON of the
// schema.
func TestFormat(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	valid := constraintest.Validator(t, []byte(citySchema))
	check := func(what, content string) {
		t.Helper()
		if err := valid(content); err != nil {
			t.Errorf("%s: content %q: %v", what, content, err)
		}
	}
	// Thinking on (the default for this template): thinking as scripted, then JSON.
	for _, stream := range []bool{false, true} {
		body := `{"model":"scripted","stream":` + map[bool]string{false: "false", true: "true"}[stream] +
			`,"format":` + citySchema + `,"messages":[{"role":"user","content":"Weather in Paris?"}]}`
		resp, b := ts.post(t, "/api/chat", body)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		var content, thinking strings.Builder
		for _, c := range lines[api.ChatResponse](t, b) {
			content.WriteString(c.Message.Content)
			thinking.WriteString(c.Message.Thinking)
			if len(c.Message.ToolCalls) > 0 {
				t.Errorf("stream %v: a tool call under format: %+v", stream, c.Message.ToolCalls)
			}
		}
		if thinking.String() != apitest.ToolThinking {
			t.Errorf("stream %v: thinking %q, want %q", stream, thinking.String(), apitest.ToolThinking)
		}
		check("chat", content.String())
	}
	// Thinking off, on /api/generate: the plain reply becomes JSON.
	resp, b := ts.post(t, "/api/generate", `{"model":"scripted","stream":false,"think":false,"prompt":"Weather in Paris?","format":`+citySchema+`}`)
	var gen api.GenerateResponse
	if resp.StatusCode != 200 || json.Unmarshal(b, &gen) != nil {
		t.Fatalf("generate: status %d: %s", resp.StatusCode, b)
	}
	check("generate", gen.Response)
	// format "json": an object (the scripted model, off its script, may not close it: a cut object is a
	// valid prefix, checked by the constraint as it came).
	resp, b = ts.post(t, "/api/generate", `{"model":"scripted","stream":false,"think":false,"prompt":"hi","format":"json","options":{"num_predict":30}}`)
	if resp.StatusCode != 200 || json.Unmarshal(b, &gen) != nil || !strings.HasPrefix(strings.TrimSpace(gen.Response), "{") {
		t.Fatalf("format json: status %d: %s", resp.StatusCode, b)
	}
	// OpenAI: json_schema and json_object.
	resp, b = ts.post(t, "/v1/chat/completions", `{"model":"scripted","reasoning_effort":"none","messages":[{"role":"user","content":"Weather?"}],`+
		`"response_format":{"type":"json_schema","json_schema":{"name":"weather","strict":true,"schema":`+citySchema+`}}}`)
	var cc struct {
		Choices []struct {
			Message struct{ Content string }
		}
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &cc) != nil || len(cc.Choices) != 1 {
		t.Fatalf("openai: status %d: %s", resp.StatusCode, b)
	}
	check("openai json_schema", cc.Choices[0].Message.Content)
	resp, b = ts.post(t, "/v1/chat/completions", `{"model":"scripted","max_tokens":30,"messages":[{"role":"user","content":"Weather?"}],"response_format":{"type":"json_object"}}`)
	if resp.StatusCode != 200 || json.Unmarshal(b, &cc) != nil || len(cc.Choices) != 1 || !strings.HasPrefix(strings.TrimSpace(cc.Choices[0].Message.Content), "{") {
		t.Fatalf("openai json_object: status %d: %s", resp.StatusCode, b)
	}
}

// TestFormatErrors: schemas that cannot be enforced are a 400 naming what is wrong, before the model loads.
func TestFormatErrors(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	for _, c := range []struct {
		path, format, msg string
	}{
		{"/api/generate", `"xml"`, `format must be "json" or a JSON schema object`},
		{"/api/generate", `{"type":"integer","minimum":1,"multipleOf":2,"not":{}}`, "unsupported keyword(s) multipleOf, not"},
		{"/api/generate", `{"type":"integer","minimum":1.5,"maximum":1.9}`, "no integer (of at most 16 digits before the point) is within minimum/maximum"},
		{"/api/chat", `{"type":"object","properties":{"a":{"type":"string","patternProperties":{}}}}`, "#/properties/a: unsupported keyword(s) patternProperties"},
		{"/api/chat", `{"oneOf":[{"type":"string"},{"type":"string","maxLength":3}]}`, "oneOf alternatives 0 and 1 may both match one value"},
		{"/api/chat", `{"oneOf":[{"type":"integer"},{"type":"number"}]}`, "oneOf alternatives 0 and 1 may both match one value"},
		{"/api/chat", `{"oneOf":[{"enum":[1,2]},{"enum":[2.0,3]}]}`, "oneOf alternatives 0 and 1 may both match one value"},
		{"/api/chat", `{"type":"strin"}`, `unknown type "strin"`},
		{"/api/chat", `{"$ref":"#/$defs/missing"}`, `$ref "#/$defs/missing": "$defs" not found`},
		{"/api/chat", `{"type":"array","prefixItems":[{"type":"string"}]}`, "prefixItems"},
		{"/api/chat", `{"type":"string","pattern":"(?<=a)b"}`, "pattern"},
		{"/api/chat", `{"type":"string","format":"email"}`, `string format "email" is not supported`},
		{"/api/chat", `{"type":"array","minItems":3,"maxItems":1}`, "minItems 3 is more than maxItems 1"},
		{"/api/chat", `{"$ref":"#"}`, "refers to itself"},
	} {
		body := `{"model":"scripted","format":` + c.format + `,"prompt":"hi","messages":[{"role":"user","content":"hi"}]}`
		resp, b := ts.post(t, c.path, body)
		var e struct{ Error string }
		if resp.StatusCode != 400 || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error, c.msg) {
			t.Errorf("%s format %s: status %d %s; want 400 with %q", c.path, c.format, resp.StatusCode, b, c.msg)
		}
	}
	for _, c := range []struct{ rf, msg string }{
		{`{"type":"json_schema"}`, "needs a json_schema object"},
		{`{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"array","uniqueItems":true}}}`, "uniqueItems"},
		{`{"type":"yaml"}`, `type "yaml" is not supported`},
	} {
		resp, b := ts.post(t, "/v1/chat/completions", `{"model":"scripted","messages":[{"role":"user","content":"hi"}],"response_format":`+c.rf+`}`)
		var e struct {
			Error struct{ Message, Type string }
		}
		if resp.StatusCode != 400 || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error.Message, c.msg) {
			t.Errorf("response_format %s: status %d %s; want 400 with %q", c.rf, resp.StatusCode, b, c.msg)
		}
	}
}
