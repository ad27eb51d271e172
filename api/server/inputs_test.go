package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/openai"
	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/sched"
	"github.com/mlxg/mlxg/text/tokenizer"
)

// TestGenerateContext: /api/generate returns the conversation as tokens in its final reply (not for
// raw prompts), and a request that sends it back continues from it: its prompt is those tokens and
// the newly rendered prompt.
func TestGenerateContext(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	body := `{"model":"scripted","prompt":"Weather?","think":false,"stream":false}`
	resp, b := ts.post(t, "/api/generate", body)
	first := decodeJSON[api.GenerateResponse](t, b)
	if resp.StatusCode != 200 || first.Response == "" || len(first.Context) <= first.PromptEvalCount {
		t.Fatalf("first reply %d: %s", resp.StatusCode, b)
	}
	tok, err := tokenizer.Load(scriptedCheckpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx32 := make([]int32, len(first.Context))
	for i, id := range first.Context {
		ctx32[i] = int32(id)
	}
	if got := tok.Decode(ctx32, false); !strings.HasSuffix(got, first.Response) || !strings.Contains(got, "Weather?") {
		t.Fatalf("the context reads %q: want the prompt and the reply %q", got, first.Response)
	}

	ctxJSON := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(first.Context)), ","), "[]")
	next := `{"model":"scripted","prompt":"Weather?","think":false,"stream":true,"context":[` + ctxJSON + `]}`
	resp, b = ts.post(t, "/api/generate", next)
	ls := lines[api.GenerateResponse](t, b)
	last := ls[len(ls)-1]
	if resp.StatusCode != 200 || !last.Done || last.PromptEvalCount != len(first.Context)+first.PromptEvalCount {
		t.Fatalf("continued: prompt of %d tokens, want the context's %d and the new prompt's %d: %s",
			last.PromptEvalCount, len(first.Context), first.PromptEvalCount, b)
	}
	for _, l := range ls[:len(ls)-1] {
		if l.Context != nil {
			t.Fatalf("a context before the final reply: %+v", l)
		}
	}
	if len(last.Context) <= last.PromptEvalCount || fmt.Sprint(last.Context[:len(first.Context)]) != fmt.Sprint(first.Context) {
		t.Fatalf("the continued context must extend the first: %v", last.Context)
	}

	// Raw prompts neither return nor take a context; ids outside the vocabulary are refused.
	_, b = ts.post(t, "/api/generate", `{"model":"scripted","prompt":"Weather?","raw":true,"stream":false,"options":{"num_predict":2}}`)
	if strings.Contains(string(b), `"context"`) {
		t.Fatalf("a raw reply with a context: %s", b)
	}
	for _, c := range []struct{ body, want string }{
		{`{"model":"scripted","prompt":"Weather?","raw":true,"context":[1,2]}`, "raw mode does not support"},
		{`{"model":"scripted","prompt":"Weather?","context":[1,-5]}`, "context[1] is -5"},
		{`{"model":"scripted","prompt":"Weather?","context":[99999999]}`, "not a token of this model"},
	} {
		if resp, b := ts.post(t, "/api/generate", c.body); resp.StatusCode != 400 || !strings.Contains(errMsg(t, b), c.want) {
			t.Errorf("%s: %d %s, want 400 with %q", c.body, resp.StatusCode, b, c.want)
		}
	}
}

// TestImagesTextOnly: an image gets a 400 that names the model and says it reads text only (after the
// model is found: an unknown model is still a 404).
func TestImagesTextOnly(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	for _, c := range []struct {
		path, body string
		status     int
		want       string
	}{
		{"/api/generate", `{"model":"scripted","prompt":"What is this?","images":["aGVsbG8="]}`, 400, `"scripted" is a text-only model`},
		{"/api/chat", `{"model":"scripted","messages":[{"role":"user","content":"What is this?","images":["aGVsbG8="]}]}`, 400, `"scripted" is a text-only model: mlxg cannot give it images; remove messages[0].images`},
		{"/api/generate", `{"model":"nope","prompt":"What is this?","images":["aGVsbG8="]}`, 404, "not found"},
	} {
		resp, b := ts.post(t, c.path, c.body)
		if resp.StatusCode != c.status || !strings.Contains(errMsg(t, b), c.want) {
			t.Errorf("%s %s: %d %s, want %d with %q", c.path, c.body, resp.StatusCode, b, c.status, c.want)
		}
	}
}

// TestSuffixFillInTheMiddle: with a suffix, a model whose tokenizer has fill-in-the-middle tokens gets
// the prefix·prompt·suffix·suffix-text·middle prompt; one without them gets a 400 that says so, on
// /api/generate and on /v1/completions.
func TestSuffixFillInTheMiddle(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	resp, b := ts.post(t, "/api/generate", `{"model":"scripted","prompt":"def add(a, b):\n    return ","suffix":"\n\nprint(add(1, 2))","stream":false,"options":{"num_predict":2}}`)
	g := decodeJSON[api.GenerateResponse](t, b)
	tok, err := tokenizer.Load(scriptedCheckpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	want := tok.Encode("<|fim_prefix|>def add(a, b):\n    return <|fim_suffix|>\n\nprint(add(1, 2))<|fim_middle|>", true)
	if resp.StatusCode != 200 || g.PromptEvalCount != len(want) {
		t.Fatalf("FIM: %d, prompt of %d tokens, want %d: %s", resp.StatusCode, g.PromptEvalCount, len(want), b)
	}

	// A random Llama with Llama 2's tokenizer: no FIM tokens.
	dir := filepath.Join(t.TempDir(), "llama")
	if err := randmodel.Generate(dir, randmodel.Tiny("llama", 32000), randmodel.Options{Seed: 1, TokenizerDir: testdata.Tokenizer(t, "llama2")}); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	store := &registry.Store{HubCache: filepath.Join(tmp, "hub"), Home: filepath.Join(tmp, "home")}
	n, _ := registry.ParseName("plain")
	if _, err := store.ImportDir(context.Background(), n, dir); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ServerConfig{Store: store, Loader: &EngineLoader{Threads: 2}, Version: "test", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	plain := &testServer{Server: httptest.NewServer(srv.Handler()), srv: srv}
	defer func() {
		plain.Close()
		srv.Close()
	}()
	resp, b = plain.post(t, "/api/generate", `{"model":"plain","prompt":"def f(","suffix":")"}`)
	if resp.StatusCode != 400 || !strings.Contains(errMsg(t, b), `"plain" does not support insert (suffix): its tokenizer has no fill-in-the-middle tokens (<|fim_prefix|>`) {
		t.Fatalf("no FIM tokens: %d %s", resp.StatusCode, b)
	}
	resp, b = plain.post(t, "/v1/completions", `{"model":"plain","prompt":"def f(","suffix":")"}`)
	if resp.StatusCode != 400 || !strings.Contains(errMsg(t, b), "does not support insert") {
		t.Fatalf("no FIM tokens, OpenAI: %d %s", resp.StatusCode, b)
	}
}

// TestBodyTooLarge: a body over the limit gets a JSON 413 in the route's error shape, also when the
// client writes its whole body before reading (a reset or broken pipe otherwise) and when the body is
// chunked; the connection stays usable.
func TestBodyTooLarge(t *testing.T) {
	ts := newTestServer(t, sched.Config{}) // MaxBodyBytes: 1 MiB
	big := `{"model":"scripted","prompt":"` + strings.Repeat("x", 32<<20) + `"}`
	for _, c := range []struct{ path, want string }{
		{"/api/generate", `{"error":"request body too large: the limit is 1048576 bytes"}`},
		{"/v1/chat/completions", `"message":"request body too large: the limit is 1048576 bytes"`},
	} {
		conn, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(60 * time.Second))
		head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", c.path, len(big))
		if _, err := io.WriteString(conn, head+big); err != nil {
			t.Fatalf("%s: writing the body: %v (the server must read it through to answer 413)", c.path, err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.StatusCode != 413 || !strings.Contains(string(b), c.want) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("%s: %d %s %q, want a JSON 413 with %s", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), b, c.want)
		}
		// The same connection serves the next request.
		if _, err := io.WriteString(conn, "GET /api/version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: the next request on the connection: %v", c.path, err)
		}
		conn.Close()
	}
	// Chunked, length unknown up front.
	resp, err := http.Post(ts.URL+"/api/chat", "application/json", io.MultiReader(strings.NewReader(big)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || !strings.Contains(string(b), "request body too large") {
		t.Fatalf("chunked: %d %s", resp.StatusCode, b)
	}
	// Under the limit nothing changes.
	if resp, b := ts.post(t, "/api/generate", `{"model":"scripted","prompt":"Weather?","think":false,"stream":false}`); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// errMsg is the message of an error reply in Ollama's shape ({"error": "..."}) or OpenAI's
// ({"error": {"message": "..."}}).
func errMsg(t *testing.T, b []byte) string {
	t.Helper()
	var o struct{ Error json.RawMessage }
	if err := json.Unmarshal(b, &o); err != nil || len(o.Error) == 0 {
		t.Fatalf("not an error reply: %s", b)
	}
	var s string
	if json.Unmarshal(o.Error, &s) == nil {
		return s
	}
	return decodeJSON[openai.Error](t, o.Error).Message
}
