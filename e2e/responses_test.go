package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/mlxg/mlxg/api/apitest"
)

// TestOpenAIGoResponses runs openai-go's Responses client on /v1/responses: a function call with its
// reasoning item, then the function's output sent back through previous_response_id and streamed.
func TestOpenAIGoResponses(t *testing.T) {
	s := start(t)
	c := openai.NewClient(option.WithBaseURL(s.base+"/v1/"), option.WithAPIKey("mlxg"), option.WithMaxRetries(0))
	ctx := context.Background()
	tools := []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", map[string]any{"type": "object",
		"properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}, false)}

	first, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: model, Tools: tools,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("What is the weather in Paris?")}})
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != "completed" || len(first.Output) != 2 || first.Output[0].Type != "reasoning" || first.Output[1].Type != "function_call" {
		t.Fatalf("response %s", first.RawJSON())
	}
	if r := first.Output[0].AsReasoning(); len(r.Content) != 1 || r.Content[0].Text != apitest.ToolThinking {
		t.Fatalf("reasoning %+v", r)
	}
	call := first.Output[1].AsFunctionCall()
	var args map[string]string
	if call.Name != apitest.ToolName || json.Unmarshal([]byte(call.Arguments), &args) != nil || args["city"] != "Paris" || call.CallID == "" {
		t.Fatalf("call %+v", call)
	}
	if first.Usage.InputTokens == 0 || first.Usage.OutputTokens == 0 {
		t.Fatalf("usage %+v", first.Usage)
	}

	out := responses.ResponseInputItemParamOfFunctionCallOutput("sunny, 24 C")
	out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
	stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: model, Tools: tools,
		PreviousResponseID: openai.String(first.ID), Reasoning: shared.ReasoningParam{Effort: shared.ReasoningEffortNone},
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{out}}})
	var text strings.Builder
	var done *responses.Response
	seq := int64(0)
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != seq {
			t.Fatalf("event %s: sequence_number %d, want %d", ev.Type, ev.SequenceNumber, seq)
		}
		seq++
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			r := ev.Response
			done = &r
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != apitest.PlainReply || done == nil || done.Status != "completed" || done.OutputText() != apitest.PlainReply ||
		done.Usage.InputTokens <= first.Usage.InputTokens {
		t.Fatalf("text %q, final %+v", text.String(), done)
	}

	_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: model,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}, PreviousResponseID: openai.String("resp_gone")})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || !strings.Contains(apiErr.Message, "previous response") {
		t.Fatalf("unknown previous_response_id: %v", err)
	}
}
