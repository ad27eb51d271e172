package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/mlxg/mlxg/api/apitest"
)

// TestLogprobsAndContextGoClients: Ollama's Go client reads logprobs (streamed) and sends a returned
// context back; openai-go reads chat logprobs and the legacy completion logprobs. The scripted model
// follows its script with a margin of about 32 nats, so each generated token has a log-probability
// near 0 and is the first of its top alternatives.
func TestLogprobsAndContextGoClients(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	c := api.NewClient(s.url(t), http.DefaultClient)
	no := false

	var lps []api.Logprob
	var text strings.Builder
	var first api.GenerateResponse
	err := c.Generate(ctx, &api.GenerateRequest{Model: model, Prompt: "Weather?", Think: &api.ThinkValue{Value: no},
		Logprobs: true, TopLogprobs: 2}, func(r api.GenerateResponse) error {
		lps = append(lps, r.Logprobs...)
		text.WriteString(r.Response)
		first = r
		return nil
	})
	if err != nil || text.String() != apitest.PlainReply || len(lps) != first.EvalCount {
		t.Fatalf("ollama generate: %v %q, %d logprobs for %d tokens", err, text.String(), len(lps), first.EvalCount)
	}
	var spelled strings.Builder
	for i, lp := range lps {
		if lp.Logprob < -1e-3 || len(lp.TopLogprobs) != 2 || lp.TopLogprobs[0].Token != lp.Token || lp.TopLogprobs[1].Logprob > -20 || len(lp.Bytes) == 0 {
			t.Fatalf("ollama logprob %d: %+v", i, lp)
		}
		spelled.WriteString(lp.Token)
	}
	if spelled.String() != apitest.PlainReply {
		t.Fatalf("the tokens spell %q", spelled.String())
	}

	// The context continues the conversation: its tokens come first in the next prompt.
	if len(first.Context) <= first.PromptEvalCount {
		t.Fatalf("context %v after a %d-token prompt", first.Context, first.PromptEvalCount)
	}
	stream := false
	var next api.GenerateResponse
	err = c.Generate(ctx, &api.GenerateRequest{Model: model, Prompt: "Weather?", Think: &api.ThinkValue{Value: no}, Stream: &stream,
		Context: first.Context}, func(r api.GenerateResponse) error { next = r; return nil })
	if err != nil || next.PromptEvalCount != len(first.Context)+first.PromptEvalCount || len(next.Context) <= next.PromptEvalCount {
		t.Fatalf("continued: %v, prompt of %d tokens after a context of %d", err, next.PromptEvalCount, len(first.Context))
	}

	// Out of range: the client reports the 400.
	err = c.Generate(ctx, &api.GenerateRequest{Model: model, Prompt: "hi", Logprobs: true, TopLogprobs: 21}, func(api.GenerateResponse) error { return nil })
	if se, ok := err.(api.StatusError); !ok || se.StatusCode != 400 || !strings.Contains(se.ErrorMessage, "top_logprobs") {
		t.Fatalf("top_logprobs 21: %v", err)
	}

	oc := openai.NewClient(option.WithBaseURL(s.base+"/v1/"), option.WithAPIKey("mlxg"), option.WithMaxRetries(0))
	chat, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, ReasoningEffort: "none",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")},
		Logprobs: openai.Bool(true), TopLogprobs: openai.Int(3)})
	if err != nil {
		t.Fatal(err)
	}
	content := chat.Choices[0].Logprobs.Content
	if chat.Choices[0].Message.Content != apitest.PlainReply || int64(len(content)) != chat.Usage.CompletionTokens {
		t.Fatalf("openai chat: %q, %d logprobs for %d tokens", chat.Choices[0].Message.Content, len(content), chat.Usage.CompletionTokens)
	}
	spelled.Reset()
	for i, lp := range content {
		if lp.Logprob < -1e-3 || len(lp.TopLogprobs) != 3 || lp.TopLogprobs[0].Token != lp.Token || len(lp.Bytes) == 0 {
			t.Fatalf("openai chat logprob %d: %+v", i, lp)
		}
		spelled.WriteString(lp.Token)
	}
	if spelled.String() != apitest.PlainReply {
		t.Fatalf("openai chat: the tokens spell %q", spelled.String())
	}

	comp, err := oc.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(model),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Weather?")}, Logprobs: openai.Int(1),
		MaxTokens: openai.Int(4)})
	if err != nil {
		t.Fatal(err)
	}
	cl := comp.Choices[0].Logprobs
	if len(cl.Tokens) != int(comp.Usage.CompletionTokens) || len(cl.TokenLogprobs) != len(cl.Tokens) || len(cl.TopLogprobs) != len(cl.Tokens) ||
		len(cl.TextOffset) != len(cl.Tokens) || len(cl.Tokens) == 0 || cl.TextOffset[0] != 0 {
		t.Fatalf("openai completion logprobs %+v", cl)
	}
	for i := 1; i < len(cl.Tokens); i++ {
		if cl.TextOffset[i] != cl.TextOffset[i-1]+int64(len([]rune(cl.Tokens[i-1]))) || cl.TokenLogprobs[i] < -1e-3 || len(cl.TopLogprobs[i]) != 1 {
			t.Fatalf("openai completion logprobs %+v", cl)
		}
	}
}
