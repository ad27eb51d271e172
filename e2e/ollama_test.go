package e2e

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"

	"github.com/mlxg/mlxg/api/apitest"
)

func weatherTool() api.Tool {
	props := api.NewToolPropertiesMap()
	props.Set("city", api.ToolProperty{Type: api.PropertyType{"string"}, Description: "the city"})
	return api.Tool{Type: "function", Function: api.ToolFunction{Name: "get_weather", Description: "Current weather in a city",
		Parameters: api.ToolFunctionParameters{Type: "object", Properties: props, Required: []string{"city"}}}}
}

func TestOllamaGoClient(t *testing.T) {
	s := start(t)
	c := api.NewClient(s.url(t), http.DefaultClient)
	ctx := context.Background()
	no, yes := false, true

	if err := c.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Version(ctx); err != nil || v == "" {
		t.Fatalf("version %q %v", v, err)
	}
	list, err := c.List(ctx)
	if err != nil || !slices.ContainsFunc(list.Models, func(m api.ListModelResponse) bool { return m.Name == model+":latest" }) {
		t.Fatalf("list %+v %v", list, err)
	}
	show, err := c.Show(ctx, &api.ShowRequest{Model: model})
	if err != nil || show.Details.Family != "llama" || !strings.Contains(show.Template, "<tool_call>") {
		t.Fatalf("show %+v %v", show, err)
	}

	t.Run("pull", func(t *testing.T) {
		var statuses []string
		full := false
		err := c.Pull(ctx, &api.PullRequest{Model: pullRepo}, func(p api.ProgressResponse) error {
			statuses = append(statuses, p.Status)
			full = full || (p.Total > 0 && p.Completed == p.Total && p.Digest != "")
			return nil
		})
		if err != nil || statuses[len(statuses)-1] != "success" || !full {
			t.Fatalf("pull: %v %v (byte progress seen: %v)", err, statuses, full)
		}
		if err := c.Delete(ctx, &api.DeleteRequest{Model: pullRepo}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("generate", func(t *testing.T) {
		var text strings.Builder
		var last api.GenerateResponse
		n := 0
		err := c.Generate(ctx, &api.GenerateRequest{Model: model, Prompt: "Weather?", Think: &api.ThinkValue{Value: false}},
			func(r api.GenerateResponse) error { text.WriteString(r.Response); last = r; n++; return nil })
		if err != nil || text.String() != apitest.PlainReply || !last.Done || last.DoneReason != "stop" || n < 3 ||
			last.EvalCount == 0 || last.PromptEvalCount == 0 || last.EvalDuration <= 0 || last.TotalDuration <= 0 {
			t.Fatalf("stream: %v %q %d lines, final %+v", err, text.String(), n, last)
		}
		err = c.Generate(ctx, &api.GenerateRequest{Model: model, Prompt: "Weather?", Stream: &no},
			func(r api.GenerateResponse) error { last = r; return nil })
		if err != nil || last.Thinking != apitest.ToolThinking || !last.Done {
			t.Fatalf("non-stream: %v %+v", err, last)
		}
	})

	t.Run("chat tool round trip", func(t *testing.T) {
		msgs := []api.Message{{Role: "user", Content: "What is the weather in Paris?"}}
		var reply api.Message
		err := c.Chat(ctx, &api.ChatRequest{Model: model, Messages: msgs, Tools: api.Tools{weatherTool()}, Stream: &yes},
			func(r api.ChatResponse) error {
				reply.Thinking += r.Message.Thinking
				reply.Content += r.Message.Content
				reply.ToolCalls = append(reply.ToolCalls, r.Message.ToolCalls...)
				return nil
			})
		if err != nil || len(reply.ToolCalls) != 1 || reply.Thinking != apitest.ToolThinking {
			t.Fatalf("%v %+v", err, reply)
		}
		call := reply.ToolCalls[0].Function
		if city, _ := call.Arguments.Get("city"); call.Name != apitest.ToolName || city != "Paris" {
			t.Fatalf("call %+v", call)
		}
		reply.Role = "assistant"
		msgs = append(msgs, reply, api.Message{Role: "tool", Content: "sunny, 24 C", ToolName: call.Name})
		var final api.ChatResponse
		err = c.Chat(ctx, &api.ChatRequest{Model: model, Messages: msgs, Tools: api.Tools{weatherTool()}, Stream: &no,
			Think: &api.ThinkValue{Value: false}}, func(r api.ChatResponse) error { final = r; return nil })
		if err != nil || final.Message.Content != apitest.PlainReply || final.DoneReason != "stop" {
			t.Fatalf("%v %+v", err, final)
		}
	})

	t.Run("embed", func(t *testing.T) {
		e, err := c.Embed(ctx, &api.EmbedRequest{Model: model, Input: []string{"The weather", "in Paris"}})
		if err != nil || len(e.Embeddings) != 2 || len(e.Embeddings[0]) != 64 || e.PromptEvalCount == 0 {
			t.Fatalf("embed %v %+v", err, e)
		}
		old, err := c.Embeddings(ctx, &api.EmbeddingRequest{Model: model, Prompt: "The weather"})
		if err != nil || len(old.Embedding) != 64 {
			t.Fatalf("embeddings %v %+v", err, old)
		}
	})

	t.Run("ps copy delete", func(t *testing.T) {
		ps, err := c.ListRunning(ctx)
		if err != nil || len(ps.Models) == 0 || ps.Models[0].Name != model+":latest" || ps.Models[0].ContextLength == 0 || ps.Models[0].Size == 0 {
			t.Fatalf("ps %v %+v", err, ps)
		}
		if err := c.Copy(ctx, &api.CopyRequest{Source: model, Destination: "go-copy"}); err != nil {
			t.Fatal(err)
		}
		list, _ := c.List(ctx)
		if !slices.ContainsFunc(list.Models, func(m api.ListModelResponse) bool { return m.Name == "go-copy:latest" }) {
			t.Fatalf("copy not listed: %+v", list.Models)
		}
		if err := c.Delete(ctx, &api.DeleteRequest{Model: "go-copy"}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("errors", func(t *testing.T) {
		err := c.Generate(ctx, &api.GenerateRequest{Model: "nope", Prompt: "hi"}, func(api.GenerateResponse) error { return nil })
		var se api.StatusError
		if !errors.As(err, &se) || se.StatusCode != 404 || se.ErrorMessage != "model 'nope' not found" {
			t.Fatalf("unknown model: %#v", err)
		}
		err = c.Generate(ctx, &api.GenerateRequest{Model: model, Prompt: "hi", Options: map[string]any{"num_predict": "ten"}},
			func(api.GenerateResponse) error { return nil })
		if !errors.As(err, &se) || se.StatusCode != 400 || !strings.Contains(se.ErrorMessage, `option "num_predict" must be of type integer`) {
			t.Fatalf("wrong option type: %#v", err)
		}
	})
}
