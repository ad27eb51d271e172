// Package mcpserver is mlxg's Model Context Protocol server: tools that let an MCP host (Claude Code, Codex,
// any other) generate and chat with local models, list and pull them, see what runs and how memory stands,
// unload a model and ask what fits. Every tool goes through the public API of a running `mlxg serve` (an
// api.Client): `mlxg mcp` serves it over stdio against the server at OLLAMA_HOST, and the server itself serves
// it over streamable HTTP at /mcp.
//
// It is built on the official Go SDK (github.com/modelcontextprotocol/go-sdk), which implements the protocol:
// initialization, tool listing, JSON-schema checked arguments, progress notifications and JSON-RPC errors.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mlxg/mlxg/api"
)

// Options configure the MCP server.
type Options struct {
	// Client reaches the mlxg server every tool talks to.
	Client *api.Client
	// Version is mlxg's version, which the server reports in its initialization.
	Version string
	// Fit answers the fit tool as `mlxg fit MODEL --ctx N` does (0: the model's maximum context); nil leaves
	// the tool out.
	Fit func(ctx context.Context, model string, numCtx int) (string, error)
}

// New makes the MCP server with mlxg's tools.
func New(o Options) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mlxg", Title: "mlxg: local MLX models", Version: o.Version}, &mcp.ServerOptions{
		Instructions: "Tools of a local mlxg server (an Ollama-compatible server for MLX checkpoints): generate and chat with " +
			"local models, list, pull and unload them, see the running models, the memory pressure and the KV-cache plan.",
	})
	t := tools{c: o.Client, fit: o.Fit}
	mcp.AddTool(s, &mcp.Tool{Name: "generate", Description: "Generate a completion of a prompt with a local model " +
		"(Ollama's /api/generate, not streamed). Returns the reply, the thinking when the model thinks, and token counts."}, t.generate)
	mcp.AddTool(s, &mcp.Tool{Name: "chat", Description: "Send a conversation to a local model (Ollama's /api/chat) and " +
		"get its next message."}, t.chat)
	mcp.AddTool(s, &mcp.Tool{Name: "list_models", Description: "List the models in the local store: name, size, family, " +
		"parameters, quantization.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.listModels)
	mcp.AddTool(s, &mcp.Tool{Name: "running", Description: "List the models loaded now (as `mlxg ps`): memory, context " +
		"length, KV-cache layout, when each unloads.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.running)
	mcp.AddTool(s, &mcp.Tool{Name: "memory_status", Description: "The machine's memory and pressure level, what the loaded " +
		"models take (weights, KV cache, prefix cache), each loaded model's KV-cache plan (per layer: K/V bits, group " +
		"size, boundary; bytes per token; the context it allows), the prefix cache's hits and misses, recent throughput " +
		"and the latest requests.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.memoryStatus)
	mcp.AddTool(s, &mcp.Tool{Name: "pull", Description: "Download a model from the Hugging Face Hub into the local store " +
		"(an MLX checkpoint: an Ollama-style name or a Hub repository such as mlx-community/Qwen3-0.6B-4bit). Sends " +
		"progress notifications when the call asks for them."}, t.pull)
	mcp.AddTool(s, &mcp.Tool{Name: "unload", Description: "Unload a running model now, releasing its memory " +
		"(requests in flight finish first).", Annotations: &mcp.ToolAnnotations{IdempotentHint: true}}, t.unload)
	if o.Fit != nil {
		mcp.AddTool(s, &mcp.Tool{Name: "fit", Description: "How a model fits in this machine's memory (as `mlxg fit`): " +
			"weights, KV bytes per token per cache format, the largest context at each memory-pressure level, the " +
			"predicted peak.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.fitTool)
	}
	return s
}

// HTTPHandler serves the MCP server over the streamable HTTP transport.
func HTTPHandler(o Options) http.Handler {
	s := New(o)
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{SessionTimeout: 30 * time.Minute})
}

type tools struct {
	c   *api.Client
	fit func(ctx context.Context, model string, numCtx int) (string, error)
}

// GenerateIn are the generate tool's arguments.
type GenerateIn struct {
	Model   string         `json:"model" jsonschema:"the model, as list_models names it"`
	Prompt  string         `json:"prompt" jsonschema:"the prompt"`
	System  string         `json:"system,omitempty" jsonschema:"a system prompt"`
	Think   *bool          `json:"think,omitempty" jsonschema:"whether a thinking model thinks first (default: the model's own)"`
	Options map[string]any `json:"options,omitempty" jsonschema:"model options as Ollama takes them: temperature, num_predict, num_ctx, seed, stop..."`
}

// Reply is what generate and chat answer.
type Reply struct {
	Model        string  `json:"model"`
	Content      string  `json:"content"`
	Thinking     string  `json:"thinking,omitempty"`
	DoneReason   string  `json:"done_reason,omitempty"`
	PromptTokens int     `json:"prompt_tokens"`
	EvalTokens   int     `json:"eval_tokens"`
	Seconds      float64 `json:"seconds"`
}

// text is a tool result holding s as text.
func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// jsonResult is v as indented JSON text.
func jsonResult(v any) (*mcp.CallToolResult, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return text(string(b)), nil
}

func think(b *bool) *api.ThinkValue {
	if b == nil {
		return nil
	}
	return &api.ThinkValue{Value: *b}
}

// reach explains an error that means no server answers at the client's address.
func (t tools) reach(err error) error {
	if err != nil && api.Unreachable(err) {
		return fmt.Errorf("no mlxg server answers at %s: start one with `mlxg serve` (%w)", t.c.Base(), err)
	}
	return err
}

func needModel(m string) error {
	if strings.TrimSpace(m) == "" {
		return errors.New("model is required: list_models names the local models")
	}
	return nil
}

func (t tools) generate(ctx context.Context, _ *mcp.CallToolRequest, in GenerateIn) (*mcp.CallToolResult, any, error) {
	if err := needModel(in.Model); err != nil {
		return nil, nil, err
	}
	stream := false
	var out Reply
	err := t.c.Generate(ctx, &api.GenerateRequest{Model: in.Model, Prompt: in.Prompt, System: in.System, Stream: &stream,
		Think: think(in.Think), Options: in.Options}, func(r api.GenerateResponse) error {
		out.Model, out.DoneReason = r.Model, r.DoneReason
		out.Content += r.Response
		out.Thinking += r.Thinking
		out.PromptTokens, out.EvalTokens, out.Seconds = r.PromptEvalCount, r.EvalCount, r.TotalDuration.Seconds()
		return nil
	})
	return t.answer(out, err)
}

// ChatMessage is one message of a chat tool call.
type ChatMessage struct {
	Role    string `json:"role" jsonschema:"system, user, assistant or tool"`
	Content string `json:"content"`
}

// ChatIn are the chat tool's arguments.
type ChatIn struct {
	Model    string         `json:"model" jsonschema:"the model, as list_models names it"`
	Messages []ChatMessage  `json:"messages" jsonschema:"the conversation so far, oldest first"`
	Think    *bool          `json:"think,omitempty" jsonschema:"whether a thinking model thinks first (default: the model's own)"`
	Options  map[string]any `json:"options,omitempty" jsonschema:"model options as Ollama takes them: temperature, num_predict, num_ctx, seed, stop..."`
}

func (t tools) chat(ctx context.Context, _ *mcp.CallToolRequest, in ChatIn) (*mcp.CallToolResult, any, error) {
	if err := needModel(in.Model); err != nil {
		return nil, nil, err
	}
	if len(in.Messages) == 0 {
		return nil, nil, errors.New("messages is empty: give at least one user message")
	}
	msgs := make([]api.Message, len(in.Messages))
	for i, m := range in.Messages {
		msgs[i] = api.Message{Role: m.Role, Content: m.Content}
	}
	stream := false
	var out Reply
	err := t.c.Chat(ctx, &api.ChatRequest{Model: in.Model, Messages: msgs, Stream: &stream, Think: think(in.Think), Options: in.Options},
		func(r api.ChatResponse) error {
			out.Model, out.DoneReason = r.Model, r.DoneReason
			out.Content += r.Message.Content
			out.Thinking += r.Message.Thinking
			out.PromptTokens, out.EvalTokens, out.Seconds = r.PromptEvalCount, r.EvalCount, r.TotalDuration.Seconds()
			return nil
		})
	return t.answer(out, err)
}

// answer is a tool's result for what the server answered: v as JSON, or err as the
// tool's error.
func (t tools) answer(v any, err error) (*mcp.CallToolResult, any, error) {
	if err != nil {
		return nil, nil, t.reach(err)
	}
	res, err := jsonResult(v)
	return res, nil, err
}

// None is the arguments of a tool that takes none.
type None struct{}

func (t tools) listModels(ctx context.Context, _ *mcp.CallToolRequest, _ None) (*mcp.CallToolResult, any, error) {
	return t.answer(t.c.List(ctx))
}

func (t tools) running(ctx context.Context, _ *mcp.CallToolRequest, _ None) (*mcp.CallToolResult, any, error) {
	return t.answer(t.c.ListRunning(ctx))
}

func (t tools) memoryStatus(ctx context.Context, _ *mcp.CallToolRequest, _ None) (*mcp.CallToolResult, any, error) {
	return t.answer(t.c.Status(ctx))
}

// ModelIn are the arguments of a tool on one model.
type ModelIn struct {
	Model string `json:"model" jsonschema:"the model's name"`
}

func (t tools) pull(ctx context.Context, req *mcp.CallToolRequest, in ModelIn) (*mcp.CallToolResult, any, error) {
	if err := needModel(in.Model); err != nil {
		return nil, nil, err
	}
	var token any
	if req != nil && req.Params != nil {
		token = req.Params.GetProgressToken()
	}
	var last string
	step := 0.0
	err := t.c.Pull(ctx, &api.PullRequest{Model: in.Model}, func(p api.ProgressResponse) error {
		last = p.Status
		if token == nil || req.Session == nil {
			return nil
		}
		n := &mcp.ProgressNotificationParams{ProgressToken: token, Message: p.Status}
		if p.Total > 0 {
			n.Progress, n.Total = float64(p.Completed), float64(p.Total)
		} else {
			step++ // progress must grow even when the step has no byte count
			n.Progress = step
		}
		_ = req.Session.NotifyProgress(ctx, n) // a client that stopped listening does not stop the pull
		return nil
	})
	if err != nil {
		return nil, nil, t.reach(err)
	}
	return text(fmt.Sprintf("pulled %s (%s)", in.Model, last)), nil, nil
}

func (t tools) unload(ctx context.Context, _ *mcp.CallToolRequest, in ModelIn) (*mcp.CallToolResult, any, error) {
	if err := needModel(in.Model); err != nil {
		return nil, nil, err
	}
	ps, err := t.c.ListRunning(ctx)
	if err != nil {
		return nil, nil, t.reach(err)
	}
	found := false
	for _, m := range ps.Models {
		found = found || m.Name == in.Model || (!strings.Contains(in.Model, ":") && m.Name == in.Model+":latest")
	}
	if !found {
		return text(fmt.Sprintf("%s is not loaded; nothing to unload", in.Model)), nil, nil
	}
	err = t.c.Generate(ctx, &api.GenerateRequest{Model: in.Model, KeepAlive: &api.Duration{}}, func(api.GenerateResponse) error { return nil })
	if err != nil {
		return nil, nil, t.reach(err)
	}
	return text(fmt.Sprintf("unloaded %s", in.Model)), nil, nil
}

// FitIn are the fit tool's arguments.
type FitIn struct {
	Model   string `json:"model" jsonschema:"a model name in the store"`
	Context int    `json:"context,omitempty" jsonschema:"the context length to plan for (default: sized from memory, as the server does with no num_ctx)"`
}

func (t tools) fitTool(ctx context.Context, _ *mcp.CallToolRequest, in FitIn) (*mcp.CallToolResult, any, error) {
	if err := needModel(in.Model); err != nil {
		return nil, nil, err
	}
	if in.Context < 0 {
		return nil, nil, fmt.Errorf("context %d: want 0 (the model's maximum) or more", in.Context)
	}
	out, err := t.fit(ctx, in.Model, in.Context)
	if err != nil {
		return nil, nil, t.reach(err)
	}
	return text(out), nil, nil
}
