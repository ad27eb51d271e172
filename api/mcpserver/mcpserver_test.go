package mcpserver

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mlxg/mlxg/api"
)

// fakeAPI answers the routes the tools use, as mlxg serve would, and records the requests.
type fakeAPI struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	f.mu.Unlock()
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/api/tags":
		json.NewEncoder(w).Encode(api.ListResponse{Models: []api.ListModelResponse{{Name: "qwen3-tiny:latest", Size: 123}}})
	case "/api/ps":
		json.NewEncoder(w).Encode(api.ProcessResponse{Models: []api.ProcessModelResponse{{Name: "qwen3-tiny:latest", KVCache: "K8/V4 g64/64"}}})
	case "/api/status":
		json.NewEncoder(w).Encode(api.StatusResponse{Memory: api.StatusMemory{Total: 64 << 30, Pressure: "normal"},
			Models: []api.StatusModel{{Name: "qwen3-tiny:latest", Plan: &api.KVPlan{Layers: []api.KVLayerPlan{{Kind: "full", KBits: "8", VBits: "4"}}}}}})
	case "/api/generate":
		if body["model"] == "missing" {
			w.WriteHeader(404)
			w.Write([]byte(`{"error":"model 'missing' not found"}`))
			return
		}
		if ka, ok := body["keep_alive"]; ok && ka != nil {
			json.NewEncoder(w).Encode(api.GenerateResponse{Model: body["model"].(string), Done: true, DoneReason: "unload"})
			return
		}
		json.NewEncoder(w).Encode(api.GenerateResponse{Model: body["model"].(string), Response: "echo: " + body["prompt"].(string), Done: true, DoneReason: "stop",
			Metrics: api.Metrics{EvalCount: 3, PromptEvalCount: 5}})
	case "/api/chat":
		msgs := body["messages"].([]any)
		last := msgs[len(msgs)-1].(map[string]any)["content"].(string)
		json.NewEncoder(w).Encode(api.ChatResponse{Model: body["model"].(string), Message: api.Message{Role: "assistant", Content: "re: " + last, Thinking: "hmm"}, Done: true})
	case "/api/pull":
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, p := range []api.ProgressResponse{{Status: "pulling manifest"}, {Status: "pulling model.safetensors", Total: 100, Completed: 50},
			{Status: "pulling model.safetensors", Total: 100, Completed: 100}, {Status: "success"}} {
			json.NewEncoder(w).Encode(p)
		}
	default:
		http.NotFound(w, r)
	}
}

func newFake(t *testing.T) (*fakeAPI, Options) {
	f := &fakeAPI{}
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	u, _ := url.Parse(ts.URL)
	return f, Options{Client: api.NewClient(u, nil), Version: "test",
		Fit: func(_ context.Context, model string, n int) (string, error) { return "Model " + model + " fits", nil }}
}

type progressLog struct {
	mu   sync.Mutex
	msgs []string
}

func connect(t *testing.T, ctx context.Context, tr mcp.Transport, pl *progressLog) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			pl.mu.Lock()
			pl.msgs = append(pl.msgs, req.Params.Message)
			pl.mu.Unlock()
		}})
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func resultText(t *testing.T, r *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// exercise lists the tools and calls each against the fake server.
func exercise(t *testing.T, ctx context.Context, cs *mcp.ClientSession, pl *progressLog) {
	tl, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tl.Tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"generate", "chat", "list_models", "running", "memory_status", "pull", "unload", "fit"} {
		if !slices.Contains(names, want) {
			t.Fatalf("tools %v lack %s", names, want)
		}
	}
	call := func(name string, args any) (*mcp.CallToolResult, string) {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r, resultText(t, r)
	}
	if r, s := call("generate", map[string]any{"model": "qwen3-tiny", "prompt": "hi"}); r.IsError || !strings.Contains(s, `"content": "echo: hi"`) || !strings.Contains(s, `"eval_tokens": 3`) {
		t.Fatalf("generate: %v %s", r.IsError, s)
	}
	if r, s := call("chat", map[string]any{"model": "qwen3-tiny", "messages": []map[string]string{{"role": "user", "content": "yo"}}}); r.IsError || !strings.Contains(s, "re: yo") || !strings.Contains(s, `"thinking": "hmm"`) {
		t.Fatalf("chat: %s", s)
	}
	if _, s := call("list_models", map[string]any{}); !strings.Contains(s, "qwen3-tiny:latest") {
		t.Fatalf("list_models: %s", s)
	}
	if _, s := call("running", nil); !strings.Contains(s, "K8/V4") {
		t.Fatalf("running: %s", s)
	}
	if _, s := call("memory_status", nil); !strings.Contains(s, `"pressure": "normal"`) || !strings.Contains(s, `"k_bits": "8"`) {
		t.Fatalf("memory_status: %s", s)
	}
	if r, s := call("unload", map[string]any{"model": "qwen3-tiny"}); r.IsError || s != "unloaded qwen3-tiny" {
		t.Fatalf("unload: %s", s)
	}
	if _, s := call("unload", map[string]any{"model": "other"}); !strings.Contains(s, "not loaded") {
		t.Fatalf("unload other: %s", s)
	}
	if _, s := call("fit", map[string]any{"model": "qwen3-tiny", "context": 4096}); s != "Model qwen3-tiny fits" {
		t.Fatalf("fit: %s", s)
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "pull", Arguments: map[string]any{"model": "qwen3-tiny"}, Meta: mcp.Meta{"progressToken": "p1"}})
	if err != nil || r.IsError || !strings.Contains(resultText(t, r), "success") {
		t.Fatalf("pull: %v %+v", err, r)
	}
	var got []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		pl.mu.Lock()
		got = slices.Clone(pl.msgs)
		pl.mu.Unlock()
		if len(got) >= 4 || time.Now().After(deadline) {
			break
		}
	}
	if len(got) < 3 || got[0] != "pulling manifest" {
		t.Fatalf("progress %q", got)
	}

	// Failures: a tool error result for what the server refuses, a JSON-RPC error for a malformed call.
	if r, s := call("generate", map[string]any{"model": "missing", "prompt": "x"}); !r.IsError || !strings.Contains(s, "not found") {
		t.Fatalf("missing model: %v %s", r.IsError, s)
	}
	if r, _ := call("generate", map[string]any{"model": "", "prompt": "x"}); !r.IsError {
		t.Fatal("empty model: no error")
	}
	for _, bad := range []*mcp.CallToolParams{
		{Name: "no_such_tool", Arguments: map[string]any{}},
		{Name: "generate", Arguments: map[string]any{"model": 7}},
		{Name: "generate", Arguments: map[string]any{"prompt": "no model"}},
		{Name: "chat", Arguments: map[string]any{"model": "m", "messages": "not a list"}},
		{Name: "fit", Arguments: []int{1, 2}},
	} {
		r, err := cs.CallTool(ctx, bad)
		if err == nil && (r == nil || !r.IsError) {
			t.Fatalf("%s %v: no error", bad.Name, bad.Arguments)
		}
	}
	// The session still works after them.
	if _, s := call("list_models", nil); !strings.Contains(s, "qwen3-tiny") {
		t.Fatalf("after errors: %s", s)
	}
}

func TestToolsInMemory(t *testing.T) {
	ctx := context.Background()
	_, o := newFake(t)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(o).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	pl := &progressLog{}
	exercise(t, ctx, connect(t, ctx, ct, pl), pl)
}

func TestToolsOverHTTP(t *testing.T) {
	ctx := context.Background()
	_, o := newFake(t)
	hs := httptest.NewServer(HTTPHandler(o))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	pl := &progressLog{}
	exercise(t, ctx, connect(t, ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL}, pl), pl)

	// Malformed JSON-RPC on the wire gets a JSON-RPC error or a 4xx, not a crash.
	for _, body := range []string{`{`, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"x"}`, `[]`} {
		req, _ := http.NewRequest("POST", hs.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 && resp.StatusCode != 200 {
			t.Fatalf("%s: %d", body, resp.StatusCode)
		}
	}
}

// TestUnreachable: with no server at the address, a tool says how to start one.
func TestUnreachable(t *testing.T) {
	ctx := context.Background()
	u, _ := url.Parse("http://127.0.0.1:1")
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(Options{Client: api.NewClient(u, nil)}).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs := connect(t, ctx, ct, &progressLog{})
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_models", Arguments: map[string]any{}})
	if err != nil || !r.IsError || !strings.Contains(resultText(t, r), "mlxg serve") {
		t.Fatalf("%v %+v", err, r)
	}
	tl, _ := cs.ListTools(ctx, nil)
	for _, tool := range tl.Tools {
		if tool.Name == "fit" {
			t.Fatal("fit listed without a Fit function")
		}
	}
}
