package server

import (
	"encoding/json"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/anthropic"
	"github.com/mlxg/mlxg/api/openai"
)

// FuzzAnthropicRequest: whatever JSON arrives, converting a Messages request to chat messages, tools and
// think answers or errors; it never panics.
func FuzzAnthropicRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"t"},{"type":"tool_use","id":"a","name":"f","input":{"x":[1,{"y":null}]}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"text","text":"r"}],"is_error":true},{"type":"text","text":"q"}]}],
			"tools":[{"name":"f","input_schema":{"type":"object","properties":{"x":{"type":"array"}}}}],"thinking":{"type":"enabled","budget_tokens":10}}`,
		`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":null}]}],"tools":[{"name":"f"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"image","source":{}}]}],"system":"x","tool_choice":{"type":"tool","name":"f"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req anthropic.MessagesRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		msgs, err := anthropicMessages(req.System, req.Messages)
		if err == nil {
			templateMessages(msgs)
		}
		if tools, err := anthropicTools(req.Tools); err == nil {
			_, _, _ = toolsJSON(tools)
		}
		_, _ = anthropicThink(req.Thinking)
	})
}

// FuzzResponsesRequest: the same for a Responses request's input, tools and text.format.
func FuzzResponsesRequest(f *testing.F) {
	for _, s := range []string{
		`{"input":"hi","instructions":"be brief","tools":[{"type":"function","name":"f","parameters":{"type":"object"}}]}`,
		`{"input":[{"role":"user","content":[{"type":"input_text","text":"q"}]},{"type":"reasoning","summary":[{"type":"summary_text","text":"s"}]},
			{"type":"function_call","call_id":"c","name":"f","arguments":"{\"a\":1}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"o"}]},
			{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"},{"type":"refusal","refusal":"no"}]}],
			"text":{"format":{"type":"json_schema","schema":{"type":"object"}}}}`,
		`{"input":[{"type":"reasoning","content":[{"type":"reasoning_text","text":"r"}]},{"type":"function_call","call_id":"c","name":"f"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req openai.ResponsesRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		if items, err := openai.InputItems(req.Input); err == nil {
			if msgs, err := responsesMessages(items, []api.Message{{Role: "user", Content: "earlier"}}); err == nil {
				templateMessages(msgs)
			}
		}
		if set, err := responsesTools(req.Tools); err == nil {
			_, _, _ = toolsJSON(set.tools)
		}
		_, _ = responsesFormat(req.Text)
	})
}
