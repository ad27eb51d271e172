package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/mlxg/mlxg/api/apitest"
)

// citySchema is what the structured-output tests ask for: the scripted model would call a tool
// or answer in prose, and the constraint turns its answer into this.
const citySchema = `{"type":"object","properties":{"city":{"enum":["Paris","Rome"]},"sunny":{"type":"boolean"}},"required":["city","sunny"],"additionalProperties":false}`

// checkCity checks a reply against citySchema.
func checkCity(t *testing.T, where, text string) {
	t.Helper()
	var v struct {
		City  *string
		Sunny *bool
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil || v.City == nil || v.Sunny == nil || (*v.City != "Paris" && *v.City != "Rome") || dec.More() {
		t.Fatalf("%s: %q does not match the schema (%v)", where, text, err)
	}
}

// TestFormatGoClients: structured outputs through Ollama's Go client (format on chat, streamed, with
// the thinking block left free; on generate) and openai-go (response_format json_schema), and the
// 400 for a schema keyword that cannot be enforced.
func TestFormatGoClients(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	oc := api.NewClient(s.url(t), http.DefaultClient)
	var content, thinking strings.Builder
	err := oc.Chat(ctx, &api.ChatRequest{Model: model, Format: json.RawMessage(citySchema),
		Messages: []api.Message{{Role: "user", Content: "Weather in Paris?"}}}, func(r api.ChatResponse) error {
		content.WriteString(r.Message.Content)
		thinking.WriteString(r.Message.Thinking)
		if len(r.Message.ToolCalls) > 0 {
			t.Errorf("a tool call under format: %+v", r.Message.ToolCalls)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if thinking.String() != apitest.ToolThinking {
		t.Fatalf("thinking %q, want %q", thinking.String(), apitest.ToolThinking)
	}
	checkCity(t, "ollama chat", content.String())

	no := false
	var gen strings.Builder
	err = oc.Generate(ctx, &api.GenerateRequest{Model: model, Prompt: "Weather?", Think: &api.ThinkValue{Value: no},
		Format: json.RawMessage(citySchema)}, func(r api.GenerateResponse) error {
		gen.WriteString(r.Response)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkCity(t, "ollama generate", gen.String())

	var se api.StatusError
	err = oc.Chat(ctx, &api.ChatRequest{Model: model, Format: json.RawMessage(`{"type":"integer","multipleOf":3}`),
		Messages: []api.Message{{Role: "user", Content: "hi"}}}, func(api.ChatResponse) error { return nil })
	if !errors.As(err, &se) || se.StatusCode != 400 || !strings.Contains(se.ErrorMessage, "unsupported keyword(s) multipleOf") {
		t.Fatalf("unsupported keyword: %v", err)
	}

	c := openai.NewClient(option.WithBaseURL(s.base+"/v1/"), option.WithAPIKey("mlxg"), option.WithMaxRetries(0))
	var schema map[string]any
	if err := json.Unmarshal([]byte(citySchema), &schema); err != nil {
		t.Fatal(err)
	}
	format := openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
		JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "weather", Strict: openai.Bool(true), Schema: schema}}}
	done, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model,
		Messages:       []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris?")},
		ResponseFormat: format})
	if err != nil || len(done.Choices) != 1 {
		t.Fatalf("%v %+v", err, done)
	}
	checkCity(t, "openai-go", done.Choices[0].Message.Content)
	if done.Choices[0].Message.JSON.Content.Raw() == "" || !bytes.Contains([]byte(done.RawJSON()), []byte(`"finish_reason":"stop"`)) {
		t.Fatalf("reply %s", done.RawJSON())
	}

	schema["properties"].(map[string]any)["sunny"] = map[string]any{"type": "array", "uniqueItems": true}
	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model,
		Messages:       []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		ResponseFormat: format})
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 400 || !strings.Contains(oe.Message, "uniqueItems") {
		t.Fatalf("unsupported keyword: %v", err)
	}
}
