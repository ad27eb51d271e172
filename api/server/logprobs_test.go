package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/openai"
	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/sched"
)

// randomServer serves a small random-weight Qwen3 (the real Qwen3 tokenizer and chat template, so its
// distribution is spread over the whole vocabulary) as "rand", and returns the checkpoint's folder.
func randomServer(t *testing.T) (*testServer, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "rand")
	cfg := randmodel.Tiny("qwen3", 151936)
	cfg.HiddenSize, cfg.IntermediateSize, cfg.HeadDim = 64, 128, 16
	cfg.EOSTokenIDs = []int{151645, 151643}
	if err := randmodel.Generate(dir, cfg, randmodel.Options{Seed: 42, TokenizerDir: testdata.Tokenizer(t, "qwen3")}); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	store := &registry.Store{HubCache: filepath.Join(tmp, "hub"), Home: filepath.Join(tmp, "home")}
	n, _ := registry.ParseName("rand")
	if _, err := store.ImportDir(context.Background(), n, dir); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ServerConfig{Store: store, Loader: &EngineLoader{Threads: 2}, Sched: sched.Config{}, MaxBodyBytes: 1 << 20,
		Version: "test", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: httptest.NewServer(srv.Handler()), srv: srv}
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	return ts, dir
}

func logSoftmax(logits []float32) []float64 {
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v))
	}
	out := make([]float64, len(logits))
	for i, v := range logits {
		out[i] = math.Log(math.Exp(float64(v)) / sum)
	}
	return out
}

func decodeJSON[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

// TestLogprobsThroughServer: Ollama's and OpenAI's logprobs on every generation route, streaming and
// not, checked against the CPU engine's own logits for the same prompt; and the bad values each API
// refuses, in its error shape.
func TestLogprobsThroughServer(t *testing.T) {
	ts, dir := randomServer(t)
	e, err := runner.Load(dir, runner.LoadOptions{Threads: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	// Greedy without penalties: each generated token is the argmax of the raw logits, so the
	// expected values follow from forward passes alone.
	const prompt = "The sea is"
	body := `{"model":"rand","prompt":"` + prompt + `","raw":true,"stream":false,"logprobs":true,"top_logprobs":3,
		"options":{"temperature":0,"repeat_penalty":1,"num_predict":6}}`
	resp, b := ts.post(t, "/api/generate", body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	g := decodeJSON[api.GenerateResponse](t, b)
	if len(g.Logprobs) != g.EvalCount || g.EvalCount == 0 {
		t.Fatalf("%d logprobs for %d tokens: %s", len(g.Logprobs), g.EvalCount, b)
	}
	caches, err := e.Model.NewCaches(false)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := e.Model.Forward(context.Background(), e.Tokenizer.Encode(prompt, true), caches, false)
	if err != nil {
		t.Fatal(err)
	}
	var spelled []byte
	for k, lp := range g.Logprobs {
		want := logSoftmax(logits)
		order := make([]int, len(want))
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return want[order[a]] > want[order[b]] })
		id := int32(order[0])
		piece := e.Tokenizer.Piece(id)
		if !bytes.Equal(piece, bytesOf(lp.Bytes)) || utf8.Valid(piece) && lp.Token != string(piece) || math.Abs(lp.Logprob-want[id]) > 1e-6 {
			t.Fatalf("token %d: %+v, want id %d %q logprob %v", k, lp, id, piece, want[id])
		}
		if len(lp.TopLogprobs) != 3 {
			t.Fatalf("token %d: %d top logprobs, want 3", k, len(lp.TopLogprobs))
		}
		for i, top := range lp.TopLogprobs {
			if p := e.Tokenizer.Piece(int32(order[i])); !bytes.Equal(p, bytesOf(top.Bytes)) || math.Abs(top.Logprob-want[order[i]]) > 1e-6 {
				t.Fatalf("token %d: top[%d] = %+v, want %q %v", k, i, top, p, want[order[i]])
			}
		}
		spelled = append(spelled, piece...)
		if logits, err = e.Model.Forward(context.Background(), []int32{id}, caches, false); err != nil {
			t.Fatal(err)
		}
	}
	if utf8.Valid(spelled) && string(spelled) != g.Response {
		t.Fatalf("the tokens spell %q, the response is %q", spelled, g.Response)
	}

	// Streaming gives the same entries, spread over the chunks.
	_, b = ts.post(t, "/api/generate", strings.Replace(body, `"stream":false`, `"stream":true`, 1))
	var streamed []api.Logprob
	for _, l := range lines[api.GenerateResponse](t, b) {
		streamed = append(streamed, l.Logprobs...)
	}
	if !reflect.DeepEqual(streamed, g.Logprobs) {
		t.Fatalf("streamed logprobs %+v, whole %+v", streamed, g.Logprobs)
	}
	// Not asked for: no logprobs key at all.
	if _, b = ts.post(t, "/api/generate", `{"model":"rand","prompt":"hi","raw":true,"stream":false,"options":{"num_predict":2}}`); strings.Contains(string(b), "logprobs") {
		t.Fatalf("logprobs sent unasked: %s", b)
	}

	// /api/chat, streaming and not; top_logprobs 0 lists no alternatives.
	chat := `{"model":"rand","think":false,"stream":false,"logprobs":true,"messages":[{"role":"user","content":"Hello"}],
		"options":{"temperature":0,"num_predict":5}}`
	_, b = ts.post(t, "/api/chat", chat)
	cr := decodeJSON[api.ChatResponse](t, b)
	if len(cr.Logprobs) != cr.EvalCount || cr.EvalCount == 0 || cr.Logprobs[0].TopLogprobs != nil {
		t.Fatalf("chat: %s", b)
	}
	_, b = ts.post(t, "/api/chat", strings.Replace(chat, `"stream":false`, `"stream":true`, 1))
	streamed = nil
	for _, l := range lines[api.ChatResponse](t, b) {
		streamed = append(streamed, l.Logprobs...)
	}
	if !reflect.DeepEqual(streamed, cr.Logprobs) {
		t.Fatalf("chat: streamed %+v, whole %+v", streamed, cr.Logprobs)
	}

	// OpenAI chat: the same tokens and values in OpenAI's shape (top_logprobs always a list).
	oai := `{"model":"rand","reasoning_effort":"none","logprobs":true,"top_logprobs":2,"temperature":0,"max_tokens":5,
		"messages":[{"role":"user","content":"Hello"}]}`
	_, b = ts.post(t, "/v1/chat/completions", oai)
	cc := decodeJSON[openai.ChatCompletion](t, b)
	lps := cc.Choices[0].Logprobs
	if lps == nil || len(lps.Content) != cc.Usage.CompletionTokens || cc.Usage.CompletionTokens == 0 {
		t.Fatalf("openai chat: %s", b)
	}
	_, b = ts.post(t, "/api/chat", strings.Replace(chat, `"logprobs":true`, `"logprobs":true,"top_logprobs":2`, 1))
	cr = decodeJSON[api.ChatResponse](t, b)
	for i, c := range lps.Content {
		o := cr.Logprobs[i]
		if c.Token != o.Token || c.Logprob != o.Logprob || !reflect.DeepEqual(c.Bytes, o.Bytes) || len(c.TopLogprobs) != 2 ||
			c.TopLogprobs[1].Token != o.TopLogprobs[1].Token || c.TopLogprobs[1].Logprob != o.TopLogprobs[1].Logprob {
			t.Fatalf("openai chat entry %d %+v, ollama's %+v", i, c, o)
		}
	}
	if !strings.Contains(string(b), `"top_logprobs":[{`) {
		t.Fatalf("ollama shape: %s", b)
	}
	_, b = ts.post(t, "/v1/chat/completions", strings.Replace(oai, `"logprobs":true`, `"stream":true,"logprobs":true`, 1))
	var content []openai.TokenLogprob
	for _, ev := range strings.Split(string(b), "\n\n") {
		data, ok := strings.CutPrefix(strings.TrimSpace(ev), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		ch := decodeJSON[openai.ChatCompletionChunk](t, []byte(data))
		if len(ch.Choices) > 0 && ch.Choices[0].Logprobs != nil {
			content = append(content, ch.Choices[0].Logprobs.Content...)
		}
	}
	if !reflect.DeepEqual(content, lps.Content) {
		t.Fatalf("openai chat: streamed %+v, whole %+v", content, lps.Content)
	}
	if _, b = ts.post(t, "/v1/chat/completions", `{"model":"rand","max_tokens":2,"messages":[{"role":"user","content":"Hi"}]}`); !strings.Contains(string(b), `"logprobs":null`) {
		t.Fatalf("openai chat without logprobs: %s", b)
	}

	// OpenAI completions: the legacy shape, offsets into the text (after an echoed prompt).
	comp := `{"model":"rand","prompt":"Hello","echo":true,"logprobs":2,"temperature":0,"max_tokens":5}`
	_, b = ts.post(t, "/v1/completions", comp)
	var cmpl struct {
		Choices []struct {
			Text     string                     `json:"text"`
			Logprobs *openai.CompletionLogprobs `json:"logprobs"`
		} `json:"choices"`
		Usage openai.Usage `json:"usage"`
	}
	if err := json.Unmarshal(b, &cmpl); err != nil || cmpl.Choices[0].Logprobs == nil {
		t.Fatalf("completions: %v %s", err, b)
	}
	cl := cmpl.Choices[0].Logprobs
	if n := cmpl.Usage.CompletionTokens; n == 0 || len(cl.Tokens) != n || len(cl.TokenLogprobs) != n || len(cl.TopLogprobs) != n || len(cl.TextOffset) != n || len(cl.Content) != n {
		t.Fatalf("completions: %d tokens: %s", n, b)
	}
	off := utf8.RuneCountInString("Hello")
	for i := range cl.Tokens {
		best := math.Inf(-1)
		for _, v := range cl.TopLogprobs[i] {
			best = max(best, v)
		}
		if cl.TextOffset[i] != off || cl.TokenLogprobs[i] != cl.Content[i].Logprob || cl.Tokens[i] != cl.Content[i].Token ||
			len(cl.TopLogprobs[i]) == 0 || len(cl.TopLogprobs[i]) > 2 || best < cl.TokenLogprobs[i] {
			t.Fatalf("completions token %d: %s", i, b)
		}
		off += utf8.RuneCountInString(cl.Tokens[i])
	}
	_, b = ts.post(t, "/v1/completions", strings.Replace(comp, `"echo":true`, `"stream":true`, 1))
	var toks []string
	var offs []int
	for _, ev := range strings.Split(string(b), "\n\n") {
		data, ok := strings.CutPrefix(strings.TrimSpace(ev), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Logprobs *openai.CompletionLogprobs `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatal(err)
		}
		if len(ch.Choices) > 0 && ch.Choices[0].Logprobs != nil {
			toks = append(toks, ch.Choices[0].Logprobs.Tokens...)
			offs = append(offs, ch.Choices[0].Logprobs.TextOffset...)
		}
	}
	first := cl.TextOffset[0]
	for i := range offs {
		if i >= len(cl.TextOffset) || offs[i] != cl.TextOffset[i]-first {
			t.Fatalf("streamed completion offsets %v, whole %v (less the echoed prompt)", offs, cl.TextOffset)
		}
	}
	if !reflect.DeepEqual(toks, cl.Tokens) {
		t.Fatalf("streamed completion tokens %q, whole %q", toks, cl.Tokens)
	}

	// Out of range: 400, in each API's error shape.
	for _, c := range []struct{ path, body, want string }{
		{"/api/generate", `{"model":"rand","prompt":"hi","logprobs":true,"top_logprobs":21}`, "top_logprobs is 21"},
		{"/api/generate", `{"model":"rand","prompt":"hi","logprobs":true,"top_logprobs":-1}`, "top_logprobs is -1"},
		{"/api/chat", `{"model":"rand","messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":30}`, "between 0 and 20"},
		{"/v1/chat/completions", `{"model":"rand","messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":21}`, "between 0 and 20"},
		{"/v1/chat/completions", `{"model":"rand","messages":[{"role":"user","content":"hi"}],"top_logprobs":2}`, "logprobs is not true"},
		{"/v1/completions", `{"model":"rand","prompt":"hi","logprobs":21}`, "logprobs is 21"},
		{"/v1/completions", `{"model":"rand","prompt":"hi","logprobs":-2}`, "logprobs is -2"},
	} {
		resp, b := ts.post(t, c.path, c.body)
		var msg string
		if strings.HasPrefix(c.path, "/v1/") {
			msg = decodeJSON[openai.ErrorResponse](t, b).Error.Message
		} else {
			msg = decodeJSON[struct{ Error string }](t, b).Error
		}
		if resp.StatusCode != 400 || !strings.Contains(msg, c.want) {
			t.Errorf("%s %s: %d %s, want 400 with %q", c.path, c.body, resp.StatusCode, b, c.want)
		}
	}
}

func bytesOf(ints []int) []byte {
	out := make([]byte, len(ints))
	for i, v := range ints {
		out[i] = byte(v)
	}
	return out
}
