package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/sched"
)

var (
	ckptOnce sync.Once
	ckptDir  string
	ckptErr  error
)

// scriptedCheckpoint writes the scripted Qwen3-tokenizer checkpoint once per test binary.
func scriptedCheckpoint(t testing.TB) string {
	tokDir := testdata.Tokenizer(t, "qwen3")
	ckptOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mlxg-scripted-")
		if err != nil {
			ckptErr = err
			return
		}
		ckptDir = filepath.Join(dir, "ckpt")
		ckptErr = apitest.WriteScripted(ckptDir, tokDir, apitest.Qwen3)
	})
	if ckptErr != nil {
		t.Fatal(ckptErr)
	}
	return ckptDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if ckptDir != "" {
		os.RemoveAll(filepath.Dir(ckptDir))
	}
	os.Exit(code)
}

type testServer struct {
	*httptest.Server
	srv *Server
}

// newTestServer serves a store holding the scripted model as "scripted" (and nothing else).
func newTestServer(t testing.TB, sc sched.Config) *testServer {
	t.Helper()
	ckpt := scriptedCheckpoint(t)
	tmp := t.TempDir()
	store := &registry.Store{HubCache: filepath.Join(tmp, "hub"), Home: filepath.Join(tmp, "home")}
	n, _ := registry.ParseName("scripted")
	if _, err := store.ImportDir(context.Background(), n, ckpt); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ServerConfig{Store: store, Loader: &EngineLoader{Threads: 2}, Sched: sc, MaxBodyBytes: 1 << 20,
		Version: "test", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: httptest.NewServer(srv.Handler()), srv: srv}
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	return ts
}

// post sends body to path (with DELETE for /api/delete, as Ollama's route wants).
func (ts *testServer) post(t testing.TB, path, body string) (*http.Response, []byte) {
	t.Helper()
	method := "POST"
	if path == "/api/delete" {
		method = "DELETE"
	}
	req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// lines decodes an NDJSON body.
func lines[T any](t *testing.T, body []byte) []T {
	t.Helper()
	var out []T
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, v)
	}
	return out
}

const weatherTool = `{"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`

func TestChatToolCallStream(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	resp, body := ts.post(t, "/api/chat", `{"model":"scripted","messages":[{"role":"user","content":"Weather in Paris?"}],"tools":[`+weatherTool+`]}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("status %d, type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	chunks := lines[api.ChatResponse](t, body)
	var thinking, content strings.Builder
	var calls []api.ToolCall
	for _, c := range chunks[:len(chunks)-1] {
		if c.Done {
			t.Fatal("done before the last line")
		}
		thinking.WriteString(c.Message.Thinking)
		content.WriteString(c.Message.Content)
		calls = append(calls, c.Message.ToolCalls...)
	}
	last := chunks[len(chunks)-1]
	if !last.Done || last.DoneReason != "stop" || last.EvalCount == 0 || last.PromptEvalCount == 0 || last.TotalDuration <= 0 {
		t.Fatalf("final line %+v", last)
	}
	if thinking.String() != apitest.ToolThinking || content.String() != "" {
		t.Fatalf("thinking %q content %q", thinking.String(), content.String())
	}
	if len(calls) != 1 || calls[0].Function.Name != apitest.ToolName || calls[0].Function.Arguments.String() != apitest.ToolArguments {
		t.Fatalf("calls %+v", calls)
	}
	if len(chunks) < 4 {
		t.Fatalf("%d lines: the reply was not streamed", len(chunks))
	}
}

func TestChatPlainAndRaw(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	// Thinking off: the template closes the think block, the model answers in text.
	resp, body := ts.post(t, "/api/chat", `{"model":"scripted","stream":false,"think":false,"messages":[{"role":"user","content":"Weather?"}]}`)
	var cr api.ChatResponse
	if resp.StatusCode != 200 || json.Unmarshal(body, &cr) != nil || cr.Message.Content != apitest.PlainReply || cr.Message.Thinking != "" {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	// No tools offered: a tool call stays text, thinking is still split off.
	resp, body = ts.post(t, "/api/generate", `{"model":"scripted","stream":false,"prompt":"Weather?"}`)
	var gr api.GenerateResponse
	if resp.StatusCode != 200 || json.Unmarshal(body, &gr) != nil {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	wantText := strings.TrimPrefix(apitest.ToolReply, "<think>"+apitest.ToolThinking+"</think>")
	if gr.Response != wantText || gr.Thinking != apitest.ToolThinking || len(gr.ToolCalls) != 0 || gr.DoneReason != "stop" {
		t.Fatalf("generate: %+v", gr)
	}
	// num_predict ends with "length".
	resp, body = ts.post(t, "/api/generate", `{"model":"scripted","stream":false,"think":false,"prompt":"Weather?","options":{"num_predict":2}}`)
	if json.Unmarshal(body, &gr) != nil || gr.DoneReason != "length" || gr.EvalCount != 2 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}

func TestOpenAIChatStream(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	resp, body := ts.post(t, "/v1/chat/completions", `{"model":"scripted","stream":true,"stream_options":{"include_usage":true},
		"messages":[{"role":"user","content":"Weather in Paris?"}],"tools":[`+weatherTool+`]}`)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	events := strings.Split(strings.TrimSpace(string(body)), "\n\n")
	if events[len(events)-1] != "data: [DONE]" {
		t.Fatalf("last event %q", events[len(events)-1])
	}
	var reasoning strings.Builder
	var finish string
	var usage *struct{ PromptTokens, CompletionTokens int }
	var args, name string
	for _, ev := range events[:len(events)-1] {
		var c struct {
			Choices []struct {
				Delta struct {
					Role             string `json:"role"`
					ReasoningContent string `json:"reasoning_content"`
					ToolCalls        []struct {
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				}
				FinishReason *string `json:"finish_reason"`
			}
			Usage *struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(ev, "data: ")), &c); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		for _, ch := range c.Choices {
			reasoning.WriteString(ch.Delta.ReasoningContent)
			for _, tc := range ch.Delta.ToolCalls {
				name, args = name+tc.Function.Name, args+tc.Function.Arguments
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
		if c.Usage != nil {
			usage = &struct{ PromptTokens, CompletionTokens int }{c.Usage.PromptTokens, c.Usage.CompletionTokens}
		}
	}
	if reasoning.String() != apitest.ToolThinking || name != apitest.ToolName || args != apitest.ToolArguments || finish != "tool_calls" {
		t.Fatalf("reasoning %q call %s(%s) finish %q", reasoning.String(), name, args, finish)
	}
	if usage == nil || usage.PromptTokens == 0 || usage.CompletionTokens == 0 {
		t.Fatalf("usage %+v", usage)
	}
}

func TestBadInput(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	big := `{"model":"scripted","prompt":"` + strings.Repeat("x", 2<<20) + `"}`
	for _, c := range []struct {
		path, body string
		status     int
		msg        string
	}{
		{"/api/chat", `{"model":`, 400, "invalid JSON"},
		{"/api/chat", ``, 400, "missing request body"},
		{"/api/generate", `{"model":"nope","prompt":"hi"}`, 404, "model 'nope' not found"},
		{"/api/chat", `{"model":"org/nope","messages":[{"role":"user","content":"hi"}]}`, 404, "model 'org/nope' not found"},
		{"/api/generate", `{"model":"scripted","prompt":"hi","options":{"top_k":"many"}}`, 400, `option "top_k" must be of type integer`},
		{"/api/generate", `{"model":"scripted","prompt":"hi","options":{"temperature":true}}`, 400, `option "temperature" must be of type float32`},
		{"/api/generate", `{"model":"scripted","prompt":"hi","options":{"stop":[1]}}`, 400, `option "stop" must be of an array of strings`},
		{"/api/generate", `{"model":"scripted","prompt":"hi","stream":"yes"}`, 400, `"stream" must be of type bool`},
		{"/api/generate", big, 413, "request body too large"},
		{"/api/generate", `{"model":"scripted","prompt":"hi","images":["aGk="]}`, 400, `"scripted" is a text-only model`},
		{"/api/chat", `{"model":"scripted","messages":[{"role":"user","content":"hi","images":["aGk="]}]}`, 400, "remove messages[0].images"},
		{"/api/chat", `{"model":"scripted","format":{"type":"number","multipleOf":2},"messages":[{"role":"user","content":"hi"}]}`, 400, "unsupported keyword(s) multipleOf"},
		{"/api/chat", `{"model":"scripted","messages":[{"role":"wizard","content":"hi"}]}`, 400, "unknown role"},
		{"/api/chat", `{"model":"scripted","think":"loud","messages":[]}`, 400, "invalid think value"},
		{"/api/generate", `{"model":"","prompt":"hi"}`, 400, "model is required"},
		{"/api/generate", `{"model":"../../etc","prompt":"hi"}`, 400, "contains '..'"},
		{"/api/embed", `{"model":"scripted","input":[1,2]}`, 400, "invalid input type"},
		{"/api/generate", `{"model":"scripted","prompt":"hi","keep_alive":"soon"}`, 400, "keep_alive"},
		{"/api/show", `{"model":"nope"}`, 404, "model 'nope' not found"},
		{"/api/delete", `{"model":"nope"}`, 404, "model 'nope' not found"},
		{"/api/copy", `{"source":"nope","destination":"b"}`, 404, "model 'nope' not found"},
	} {
		resp, body := ts.post(t, c.path, c.body)
		var e struct{ Error string }
		if resp.StatusCode != c.status || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, c.msg) {
			t.Errorf("%s %.80s: status %d body %.200s; want %d with %q", c.path, c.body, resp.StatusCode, body, c.status, c.msg)
		}
	}
	// OpenAI's error shape.
	for _, c := range []struct {
		path, body string
		status     int
		msg, typ   string
	}{
		{"/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, 404, "model 'nope' not found", "not_found_error"},
		{"/v1/chat/completions", `{"model":"scripted","n":2,"messages":[{"role":"user","content":"hi"}]}`, 400, "n = 2", "invalid_request_error"},
		{"/v1/chat/completions", `{"model":"scripted","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,aGk="}}]}]}`, 400, "text-only model", "invalid_request_error"},
		{"/v1/chat/completions", `{"model":"scripted","response_format":{"type":"json_schema","json_schema":{"name":"x"}},"messages":[{"role":"user","content":"hi"}]}`, 400, "json_schema.schema is missing", "invalid_request_error"},
		{"/v1/chat/completions", `{"model":"scripted","messages":`, 400, "invalid JSON", "invalid_request_error"},
		{"/v1/embeddings", `{"model":"scripted","input":[[1,2]]}`, 400, "input must be", "invalid_request_error"},
		{"/v1/completions", `{"model":"scripted","prompt":["a","b"]}`, 400, "prompt must be", "invalid_request_error"},
	} {
		resp, body := ts.post(t, c.path, c.body)
		var e struct {
			Error struct{ Message, Type string }
		}
		if resp.StatusCode != c.status || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error.Message, c.msg) || e.Error.Type != c.typ {
			t.Errorf("%s %.80s: status %d body %.200s", c.path, c.body, resp.StatusCode, body)
		}
	}
	// A browser page from elsewhere is refused; loopback origins are allowed.
	req, _ := http.NewRequest("GET", ts.URL+"/api/tags", nil)
	req.Header.Set("Origin", "https://evil.example")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("foreign origin: %v %v", resp, err)
	}
	req.Header.Set("Origin", "http://localhost:3000")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:3000" {
		t.Errorf("loopback origin: %v %v", resp, err)
	}
	// A browser's preflight.
	pre, _ := http.NewRequest("OPTIONS", ts.URL+"/v1/chat/completions", nil)
	pre.Header.Set("Origin", "http://127.0.0.1:8080")
	pre.Header.Set("Access-Control-Request-Method", "POST")
	if resp, err := http.DefaultClient.Do(pre); err != nil || resp.StatusCode != 204 || !strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Content-Type") {
		t.Errorf("preflight: %v %v", resp, err)
	}
}

func TestLoadUnloadPsEmbed(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	resp, body := ts.post(t, "/api/generate", `{"model":"scripted"}`)
	var gr api.GenerateResponse
	if resp.StatusCode != 200 || json.Unmarshal(body, &gr) != nil || gr.DoneReason != "load" || !gr.Done {
		t.Fatalf("load: %d %s", resp.StatusCode, body)
	}
	r, err := http.Get(ts.URL + "/api/ps")
	if err != nil {
		t.Fatal(err)
	}
	var ps api.ProcessResponse
	_ = json.NewDecoder(r.Body).Decode(&ps)
	r.Body.Close()
	if len(ps.Models) != 1 || ps.Models[0].Name != "scripted:latest" || ps.Models[0].ContextLength != 4096 || ps.Models[0].KVCache == "" ||
		ps.Models[0].Size <= 0 || time.Until(ps.Models[0].ExpiresAt) < 4*time.Minute || ps.Models[0].Details.Family != "llama" {
		t.Fatalf("ps %+v", ps)
	}
	resp, body = ts.post(t, "/api/embed", `{"model":"scripted","input":["The weather","zz qq"]}`)
	var er api.EmbedResponse
	if resp.StatusCode != 200 || json.Unmarshal(body, &er) != nil || len(er.Embeddings) != 2 || len(er.Embeddings[0]) != 64 || er.PromptEvalCount == 0 {
		t.Fatalf("embed: %d %.300s", resp.StatusCode, body)
	}
	// The model was loaded already: the counts are still all there, load_duration (the time to the model
	// ready, as Ollama measures it) above 0, as the AI SDK's Ollama provider requires.
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(body, &raw)
	for _, k := range []string{"total_duration", "load_duration", "prompt_eval_count"} {
		if v, ok := raw[k]; !ok || string(v) == "0" {
			t.Errorf("embed reply's %s = %s", k, v)
		}
	}
	var norm float32
	for _, x := range er.Embeddings[0] {
		norm += x * x
	}
	if norm < 0.999 || norm > 1.001 {
		t.Fatalf("embedding norm² %v, want 1", norm)
	}
	resp, body = ts.post(t, "/api/chat", `{"model":"scripted","messages":[],"keep_alive":0}`)
	var cr api.ChatResponse
	if resp.StatusCode != 200 || json.Unmarshal(body, &cr) != nil || cr.DoneReason != "unload" {
		t.Fatalf("unload: %d %s", resp.StatusCode, body)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(ts.srv.sched.Running()) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("model still loaded after keep_alive 0")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClientDisconnect: a client that goes away mid-stream stops generation, frees its slot, and leaves no
// goroutine behind.
func TestClientDisconnect(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	// Warm up (load) so that the model's own goroutines are not counted.
	ts.post(t, "/api/generate", `{"model":"scripted"}`)
	http.DefaultClient.CloseIdleConnections()
	time.Sleep(50 * time.Millisecond)
	before := runtime.NumGoroutine()

	ctx, cancel := context.WithCancel(context.Background())
	// An unscripted prompt: greedy decoding repeats token 0 until the context is full.
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/api/generate",
		strings.NewReader(`{"model":"scripted","raw":true,"prompt":"zzzz","options":{"temperature":0}}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	for range 5 {
		if _, err := rd.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	resp.Body.Close()

	deadline := time.Now().Add(10 * time.Second)
	for {
		st := ts.srv.sched.Running()
		if len(st) == 1 && st[0].Active == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("generation still holds the model after the client left: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	http.DefaultClient.CloseIdleConnections()
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The server still answers.
	resp2, body := ts.post(t, "/api/generate", `{"model":"scripted","stream":false,"think":false,"prompt":"Weather?"}`)
	if resp2.StatusCode != 200 || !strings.Contains(string(body), apitest.PlainReply) {
		t.Fatalf("after disconnect: %d %s", resp2.StatusCode, body)
	}
}

// TestQueueFull: with one slot and a queue of one, a third request gets 503 while the first runs.
func TestQueueFull(t *testing.T) {
	ts := newTestServer(t, sched.Config{NumParallel: 1, MaxQueue: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/api/generate",
		strings.NewReader(`{"model":"scripted","raw":true,"prompt":"zzzz","options":{"temperature":0}}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	queued := make(chan string)
	go func() {
		_, body := ts.post(t, "/api/generate", `{"model":"scripted","stream":false,"think":false,"prompt":"Weather?"}`)
		queued <- string(body)
	}()
	time.Sleep(300 * time.Millisecond) // the second request is waiting for the slot
	r, body := ts.post(t, "/v1/chat/completions", `{"model":"scripted","messages":[{"role":"user","content":"hi"}]}`)
	if r.StatusCode != 503 || !strings.Contains(string(body), "too many requests are queued") {
		t.Fatalf("third request: %d %s", r.StatusCode, body)
	}
	cancel() // the first client leaves: the queued request runs
	select {
	case b := <-queued:
		if !strings.Contains(b, apitest.PlainReply) {
			t.Fatalf("queued request: %s", b)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the queued request never ran")
	}
}

// TestGracefulShutdown: on shutdown, a request still generating after the grace period is cancelled, Serve
// returns, and the model is unloaded.
func TestGracefulShutdown(t *testing.T) {
	ckpt := scriptedCheckpoint(t)
	tmp := t.TempDir()
	store := &registry.Store{HubCache: filepath.Join(tmp, "hub"), Home: filepath.Join(tmp, "home")}
	n, _ := registry.ParseName("scripted")
	if _, err := store.ImportDir(context.Background(), n, ckpt); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ServerConfig{Store: store, Loader: &EngineLoader{Threads: 2}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l, 300*time.Millisecond) }()
	resp, err := http.Post("http://"+l.Addr().String()+"/api/generate", "application/json",
		strings.NewReader(`{"model":"scripted","raw":true,"prompt":"zzzz","options":{"temperature":0}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if _, err := rd.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stop()
	_, _ = io.Copy(io.Discard, rd) // the stream ends once the grace period is over
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return")
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("shut down after %v, before the grace period", d)
	}
	if st := srv.sched.Running(); len(st) != 0 {
		t.Fatalf("models still loaded: %+v", st)
	}
}

func TestGenerationDefaults(t *testing.T) {
	o := api.DefaultOptions()
	generationDefaults(&o, map[string]any{"temperature": 0.6, "top_k": 20.0, "top_p": 0.95, "min_p": 0.0, "repetition_penalty": 1.1, "do_sample": true})
	if o.Temperature != 0.6 || o.TopK != 20 || o.TopP != 0.95 || o.MinP != 0 || o.RepeatPenalty != float32(1.1) {
		t.Fatalf("%+v", o)
	}
	// The request's options still win.
	if err := o.FromMap(map[string]any{"temperature": 0.0}); err != nil || o.Temperature != 0 {
		t.Fatalf("%v %+v", err, o)
	}
}

// TestLoadError: a model that cannot load fails every request waiting for it with the loader's reason
// (an unknown model_type: a 400 naming it, not a 500), and the server goes on serving.
func TestLoadError(t *testing.T) {
	ts := newTestServer(t, sched.Config{NumParallel: 4})
	bad := t.TempDir()
	ckpt := scriptedCheckpoint(t)
	for _, f := range []string{"model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(ckpt, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bad, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, _ := os.ReadFile(filepath.Join(ckpt, "config.json"))
	cfg = bytes.Replace(cfg, []byte(`"model_type": "llama"`), []byte(`"model_type": "nosuch"`), 1)
	if err := os.WriteFile(filepath.Join(bad, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	n, _ := registry.ParseName("broken")
	if _, err := ts.srv.cfg.Store.ImportDir(context.Background(), n, bad); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			resp, body := ts.post(t, "/api/chat", `{"model":"broken","messages":[{"role":"user","content":"hi"}]}`)
			if resp.StatusCode != 400 || !strings.Contains(string(body), `model_type \"nosuch\"`) || !strings.Contains(string(body), "supported model types") {
				t.Errorf("%d %s", resp.StatusCode, body)
			}
		})
	}
	wg.Wait()
	resp, body := ts.post(t, "/api/generate", `{"model":"scripted","stream":false,"think":false,"prompt":"Weather?"}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), apitest.PlainReply) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// TestMemoryBudgetEvicts: with room for one model, loading a second unloads the idle first one.
func TestMemoryBudgetEvicts(t *testing.T) {
	ckpt := scriptedCheckpoint(t)
	tmp := t.TempDir()
	store := &registry.Store{HubCache: filepath.Join(tmp, "hub"), Home: filepath.Join(tmp, "home")}
	var size int64
	loader := &EngineLoader{Threads: 2}
	for _, name := range []string{"first", "second"} {
		n, _ := registry.ParseName(name)
		lm, err := store.ImportDir(context.Background(), n, ckpt)
		if err != nil {
			t.Fatal(err)
		}
		p, err := loader.Plan(lm, 4096, 0)
		if err != nil {
			t.Fatal(err)
		}
		size = p.Peak
	}
	srv, err := NewServer(ServerConfig{Store: store, Loader: loader, Sched: sched.Config{MemoryBudget: size * 3 / 2}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: httptest.NewServer(srv.Handler()), srv: srv}
	defer func() { ts.Close(); srv.Close() }()
	running := func() []string {
		var names []string
		for _, st := range srv.sched.Running() {
			names = append(names, st.Name)
		}
		return names
	}
	ts.post(t, "/api/generate", `{"model":"first"}`)
	if got := running(); len(got) != 1 || got[0] != "first:latest" {
		t.Fatalf("running %v", got)
	}
	resp, body := ts.post(t, "/api/generate", `{"model":"second","prompt":"Weather?","think":false,"stream":false}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), apitest.PlainReply) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if got := running(); len(got) != 1 || got[0] != "second:latest" {
		t.Fatalf("running %v, want only second:latest", got)
	}
}

// pressuredLoader refuses a plan as memory pressure unless the scheduler counts loaded models'
// memory as freed (what unloading them would give back).
type pressuredLoader struct {
	*EngineLoader
	freed []int64 // every plan's freed bytes
}

func (l *pressuredLoader) Plan(m *registry.LocalModel, numCtx int, freed int64) (*LoadPlan, error) {
	l.freed = append(l.freed, freed)
	if l.freed[0] == 0 && len(l.freed) > 1 && freed == 0 {
		return nil, &pressureError{} // another model is loaded and nothing would be freed
	}
	return l.EngineLoader.Plan(m, numCtx, freed)
}

// TestPressureSwapsIdleModel: under memory pressure a request for a second model unloads the idle
// first one when the plan with its memory counted as freed fits, instead of answering 503.
func TestPressureSwapsIdleModel(t *testing.T) {
	ckpt := scriptedCheckpoint(t)
	tmp := t.TempDir()
	store := &registry.Store{HubCache: filepath.Join(tmp, "hub"), Home: filepath.Join(tmp, "home")}
	for _, name := range []string{"first", "second"} {
		n, _ := registry.ParseName(name)
		if _, err := store.ImportDir(context.Background(), n, ckpt); err != nil {
			t.Fatal(err)
		}
	}
	loader := &pressuredLoader{EngineLoader: &EngineLoader{Threads: 2}}
	srv, err := NewServer(ServerConfig{Store: store, Loader: loader, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: httptest.NewServer(srv.Handler()), srv: srv}
	defer func() { ts.Close(); srv.Close() }()
	ts.post(t, "/api/generate", `{"model":"first"}`)
	resp, body := ts.post(t, "/api/generate", `{"model":"second","prompt":"Weather?","think":false,"stream":false}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), apitest.PlainReply) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var names []string
	for _, st := range srv.sched.Running() {
		names = append(names, st.Name)
	}
	if len(names) != 1 || names[0] != "second:latest" {
		t.Fatalf("running %v, want only second:latest", names)
	}
	if n := len(loader.freed); n != 3 || loader.freed[1] != 0 || loader.freed[2] <= 0 {
		t.Errorf("plans with freed %v, want [0 0 >0]", loader.freed)
	}
}

// TestModelWithoutThinkingOrTools: a Llama 3 chat template (no thinking, no tools in this version) answers
// plainly, and asking it to think or offering it tools is a 400, as in Ollama.
func TestModelWithoutThinkingOrTools(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "llama")
	if err := apitest.WriteScripted(dir, testdata.Tokenizer(t, "llama3_1"), []apitest.Script{{After: "\n\n", Reply: "Hello from Llama."}}); err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, sched.Config{})
	n, _ := registry.ParseName("llama")
	if _, err := ts.srv.cfg.Store.ImportDir(context.Background(), n, dir); err != nil {
		t.Fatal(err)
	}
	resp, body := ts.post(t, "/api/chat", `{"model":"llama","stream":false,"messages":[{"role":"user","content":"Hi"}]}`)
	var cr api.ChatResponse
	if resp.StatusCode != 200 || json.Unmarshal(body, &cr) != nil || cr.Message.Content != "Hello from Llama." || cr.Message.Thinking != "" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	for body, msg := range map[string]string{
		`{"model":"llama","think":true,"messages":[{"role":"user","content":"Hi"}]}`:                  `"llama" does not support thinking`,
		`{"model":"llama","tools":[` + weatherTool + `],"messages":[{"role":"user","content":"Hi"}]}`: `"llama" does not support tools`,
	} {
		resp, b := ts.post(t, "/api/chat", body)
		var e struct{ Error string }
		if resp.StatusCode != 400 || json.Unmarshal(b, &e) != nil || e.Error != msg {
			t.Errorf("%d %s, want 400 %s", resp.StatusCode, b, msg)
		}
	}
	// think false is fine on any model.
	resp, body = ts.post(t, "/api/generate", `{"model":"llama","stream":false,"think":false,"prompt":"Hi"}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "Hello from Llama.") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// Each request answered with an error is logged with its message and the route, as a warning (4xx) or
// an error (5xx); one whose stream carries the error says so beside its status 200.
func TestErrorsLogged(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	buf := &syncBuffer{}
	ts.srv.log = slog.New(slog.NewTextHandler(buf, nil))
	ts.post(t, "/v1/messages", `{"model":"scripted","max_tokens":`)
	if r, err := http.Get(ts.URL + "/v1/models/nope"); err == nil {
		r.Body.Close()
	}
	ts.post(t, "/api/chat", `{"model":"scripted","messages":[{"role":"wizard","content":"hi"}]}`)
	log := buf.String()
	for _, want := range []string{
		`level=WARN msg=request method=POST path=/v1/messages status=400`,
		`error="invalid JSON in the request body`,
		`path=/v1/models/nope status=404`,
		`route=/v1/models/*model error="model 'nope' not found"`,
		`path=/api/chat status=400`,
		`error="messages[0]: unknown role \"wizard\"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
}

// pressureError is a transient refusal, as the memory policy's under memory pressure.
type pressureError struct{ after time.Duration }

func (e *pressureError) Error() string   { return "memory pressure is critical: retry when it drops" }
func (e *pressureError) Transient() bool { return true }

// refusingLoader refuses every load with err.
type refusingLoader struct{ err error }

func (l refusingLoader) Plan(*registry.LocalModel, int, int64) (*LoadPlan, error) { return nil, l.err }
func (l refusingLoader) Load(context.Context, *LoadPlan) (Model, error)           { return nil, l.err }

// delayedError is a transient refusal that names its delay.
type delayedError struct{ pressureError }

func (e *delayedError) RetryAfter() time.Duration { return e.after }

// A transient refusal (memory pressure; a plan that does not fit while other models serve) is a 503 with
// Retry-After on every API, in its error shape, never a 500.
func TestTransientRefusal503(t *testing.T) {
	for _, c := range []struct {
		err   error
		after string
	}{{fmt.Errorf("loading: %w", &pressureError{}), "10"}, {&delayedError{pressureError{after: 2500 * time.Millisecond}}, "3"}} {
		tmp := t.TempDir()
		store := &registry.Store{HubCache: filepath.Join(tmp, "hub"), Home: filepath.Join(tmp, "home")}
		n, _ := registry.ParseName("scripted")
		if _, err := store.ImportDir(context.Background(), n, scriptedCheckpoint(t)); err != nil {
			t.Fatal(err)
		}
		srv, err := NewServer(ServerConfig{Store: store, Loader: refusingLoader{c.err}, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		ts := &testServer{Server: httptest.NewServer(srv.Handler()), srv: srv}
		for path, body := range map[string]string{
			"/api/chat":            `{"model":"scripted","messages":[{"role":"user","content":"hi"}]}`,
			"/api/generate":        `{"model":"scripted","prompt":"hi","stream":false}`,
			"/api/embed":           `{"model":"scripted","input":"hi"}`,
			"/v1/chat/completions": `{"model":"scripted","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			"/v1/responses":        `{"model":"scripted","stream":true,"input":"hi"}`,
			"/v1/messages":         `{"model":"scripted","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		} {
			resp, b := ts.post(t, path, body)
			var shape struct {
				Error json.RawMessage
				Type  string
			}
			_ = json.Unmarshal(b, &shape)
			if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != c.after || !strings.Contains(string(b), "memory pressure") || len(shape.Error) == 0 {
				t.Errorf("%s: %d Retry-After %q %s", path, resp.StatusCode, resp.Header.Get("Retry-After"), b)
			}
			switch {
			case path == "/v1/messages" && (shape.Type != "error" || !strings.Contains(string(shape.Error), "overloaded_error")),
				strings.HasPrefix(path, "/api/") && shape.Error[0] != '"',
				path == "/v1/chat/completions" && shape.Error[0] != '{':
				t.Errorf("%s: not its API's error shape: %s", path, b)
			}
		}
		ts.Close()
		srv.Close()
	}
}
