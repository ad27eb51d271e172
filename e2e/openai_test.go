package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/mlxg/mlxg/api/apitest"
)

func TestOpenAIGoClient(t *testing.T) {
	s := start(t)
	c := openai.NewClient(option.WithBaseURL(s.base+"/v1/"), option.WithAPIKey("mlxg"), option.WithMaxRetries(0))
	ctx := context.Background()

	page, err := c.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range page.Data {
		found = found || m.ID == model+":latest"
	}
	if !found {
		t.Fatalf("models %+v", page.Data)
	}
	if m, err := c.Models.Get(ctx, model); err != nil || m.ID != model {
		t.Fatalf("model %+v %v", m, err)
	}

	tool := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather",
		Description: openai.String("Current weather in a city"),
		Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
			"required": []string{"city"}}})
	stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         model,
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris?")},
		Tools:         []openai.ChatCompletionToolUnionParam{tool},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	acc := openai.ChatCompletionAccumulator{}
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "tool_calls" || len(acc.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("accumulated %+v", acc.ChatCompletion)
	}
	call := acc.Choices[0].Message.ToolCalls[0]
	var args map[string]string
	if call.Function.Name != apitest.ToolName || json.Unmarshal([]byte(call.Function.Arguments), &args) != nil || args["city"] != "Paris" || call.ID == "" {
		t.Fatalf("call %+v", call)
	}
	if acc.Usage.PromptTokens == 0 || acc.Usage.CompletionTokens == 0 || acc.Usage.TotalTokens != acc.Usage.PromptTokens+acc.Usage.CompletionTokens {
		t.Fatalf("usage %+v", acc.Usage)
	}

	// The tool result goes back; with reasoning off the model answers.
	done, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: model,
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.UserMessage("Weather in Paris?"),
			acc.Choices[0].Message.ToParam(),
			openai.ToolMessage("sunny, 24 C", call.ID),
		},
		Tools:           []openai.ChatCompletionToolUnionParam{tool},
		ReasoningEffort: shared.ReasoningEffort("none"),
	})
	if err != nil || done.Choices[0].Message.Content != apitest.PlainReply || done.Choices[0].FinishReason != "stop" {
		t.Fatalf("%v %+v", err, done)
	}

	emb, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: model,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"The weather", "in Paris"}}})
	if err != nil || len(emb.Data) != 2 || len(emb.Data[0].Embedding) != 64 {
		t.Fatalf("embeddings %v %+v", err, emb)
	}

	comp, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(model),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Weather?")}, MaxTokens: openai.Int(3)})
	if err != nil || len(comp.Choices) != 1 || comp.Choices[0].FinishReason != "length" || comp.Usage.CompletionTokens != 3 {
		t.Fatalf("completion %v %+v", err, comp)
	}

	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "nope",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Message != "model 'nope' not found" {
		t.Fatalf("unknown model: %v", err)
	}
}
