package server

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
)

// do sends body to path on the KV server and returns the response (its body read).
func (ks *kvServer) do(t *testing.T, method, path, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, ks.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

func (ks *kvServer) ps(t *testing.T) api.ProcessModelResponse {
	t.Helper()
	_, b := ks.do(t, "GET", "/api/ps", "")
	var ps api.ProcessResponse
	if err := json.Unmarshal(b, &ps); err != nil || len(ps.Models) != 1 {
		t.Fatalf("/api/ps: %v %s", err, b)
	}
	return ps.Models[0]
}

func (ks *kvServer) show(t *testing.T) map[string]any {
	t.Helper()
	resp, b := ks.do(t, "POST", "/api/show", `{"model":"scripted"}`)
	var sr api.ShowResponse
	if err := json.Unmarshal(b, &sr); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/api/show: %d %v %s", resp.StatusCode, err, b)
	}
	return sr.ModelInfo
}

// scriptedShape is the scripted checkpoint's cache shape, as the loader reads it.
func scriptedShape(t *testing.T) kvstore.ModelShape {
	ckpt := scriptedCheckpoint(t)
	cfg, err := os.ReadFile(filepath.Join(ckpt, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	files, _ := filepath.Glob(filepath.Join(ckpt, "*")) // the store counts every file of the snapshot
	for _, f := range files {
		st, _ := os.Stat(f)
		size += st.Size()
	}
	shape, err := kvstore.ShapeFromConfig(cfg, size)
	if err != nil {
		t.Fatal(err)
	}
	return shape
}

// With no num_ctx anywhere, the model loads with the context the memory policy affords: its maximum
// when memory is plentiful, less when half the free memory holds less; /api/show says what a load would
// choose before it happens and what it chose after, /api/ps and the PERF line too.
func TestAutoContextFromMemory(t *testing.T) {
	ks := startKVServer(t) // 64 GiB, 40 available: the scripted model's maximum (8192) fits many times
	info := ks.show(t)
	if info["mlxg.context_length"] != float64(8192) || info["mlxg.context_loaded"] != false ||
		!strings.Contains(info["mlxg.context_reason"].(string), "the model's maximum 8192") {
		t.Errorf("/api/show before the load: %v %v %v", info["mlxg.context_length"], info["mlxg.context_loaded"], info["mlxg.context_reason"])
	}
	for k, v := range info {
		if strings.HasSuffix(k, ".context_length") && !strings.HasPrefix(k, "mlxg.") && v != float64(8192) {
			t.Errorf("/api/show's trained maximum: %s %v", k, v)
		}
	}
	ks.chat(t, "Weather?")
	m := ks.ps(t)
	if m.ContextLength != 8192 || !strings.Contains(m.ContextReason, "sized from memory: the model's maximum 8192") {
		t.Errorf("/api/ps: context %d reason %q", m.ContextLength, m.ContextReason)
	}
	if info := ks.show(t); info["mlxg.context_length"] != float64(8192) || info["mlxg.context_loaded"] != true {
		t.Errorf("/api/show after the load: %v %v", info["mlxg.context_length"], info["mlxg.context_loaded"])
	}
	_, sb := ks.do(t, "GET", "/api/status", "")
	var st api.StatusResponse
	if err := json.Unmarshal(sb, &st); err != nil || len(st.Models) != 1 {
		t.Fatalf("/api/status: %v %s", err, sb)
	}
	if sm := st.Models[0]; sm.ContextReason != m.ContextReason || sm.ContextUsed == nil || sm.ContextUsed.Tokens <= 0 ||
		sm.ContextUsed.KVBytes <= 0 || sm.KVHeld != 0 || sm.Plan == nil || sm.Plan.ContextReason != m.ContextReason {
		t.Errorf("/api/status: %+v used %+v", sm, sm.ContextUsed)
	}
	if !strings.Contains(ks.logs.String(), "num_ctx=8192") {
		t.Errorf("no num_ctx in the PERF line:\n%s", ks.logs.String())
	}

	// Less memory: half of what is free holds 6000 tokens at the default layout.
	shape := scriptedShape(t)
	base, err := kvstore.Choose(kvstore.PolicyInput{Model: shape, NumCtx: 1024, Memory: sysmem.Info{Total: 16 << 30, Available: 12 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	avail := 12<<30 - base.Free + 2*6000*base.KVTokenBytes
	ks2 := startKVServer(t)
	ks2.sensor.info = sysmem.Info{Total: 16 << 30, Available: uint64(avail), Source: "test"}
	ks2.chat(t, "Weather?")
	m = ks2.ps(t)
	if want := 6000 - 6000%kvstore.BlockTokens; m.ContextLength != want || !strings.Contains(m.ContextReason, "fits in half") ||
		!strings.HasPrefix(m.KVCache, "K6h/V6h") {
		t.Errorf("/api/ps with less memory: context %d (want %d) kv %q reason %q", m.ContextLength, want, m.KVCache, m.ContextReason)
	}
}

// An explicit num_ctx wins over the context sized from memory: MLXG_CONTEXT_LENGTH, then the request's.
func TestExplicitContextWins(t *testing.T) {
	ks := startKVServerWith(t, func(c *ServerConfig) { c.ContextLength = 2048 })
	ks.chat(t, "Weather?")
	if m := ks.ps(t); m.ContextLength != 2048 || m.ContextReason != "num_ctx 2048 asked" {
		t.Errorf("MLXG_CONTEXT_LENGTH 2048: context %d reason %q", m.ContextLength, m.ContextReason)
	}
	resp, b := ks.do(t, "POST", "/api/generate", `{"model":"scripted","prompt":"hi","stream":false,"options":{"num_ctx":1024,"num_predict":2}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if m := ks.ps(t); m.ContextLength != 1024 {
		t.Errorf("num_ctx 1024 asked: context %d", m.ContextLength)
	}
	if h := resp.Header.Get(headerNumCtx); h != "1024" {
		t.Errorf("%s: %q", headerNumCtx, h)
	}
}

// Bad num_ctx values: 0, negative and values beyond any integer are a 400 that says what to do; one
// above the model's maximum (10^9 too) is clamped to the maximum and loads nothing larger.
func TestNumCtxBadInput(t *testing.T) {
	ks := startKVServer(t)
	for _, v := range []string{"0", "-1", "-4096", "1e30"} {
		resp, b := ks.do(t, "POST", "/api/generate", `{"model":"scripted","prompt":"hi","stream":false,"options":{"num_ctx":`+v+`}}`)
		if resp.StatusCode != 400 || !strings.Contains(string(b), "num_ctx") {
			t.Errorf("num_ctx %s: %d %s", v, resp.StatusCode, b)
		}
	}
	for _, v := range []string{"8193", "1000000000", "1e9"} {
		resp, b := ks.do(t, "POST", "/api/generate", `{"model":"scripted","prompt":"hi","stream":false,"options":{"num_ctx":`+v+`,"num_predict":2}}`)
		if resp.StatusCode != 200 {
			t.Fatalf("num_ctx %s: %d %s", v, resp.StatusCode, b)
		}
		m := ks.ps(t)
		if m.ContextLength != 8192 || !strings.Contains(m.ContextReason, "lowered to the model's maximum 8192") {
			t.Errorf("num_ctx %s: context %d reason %q", v, m.ContextLength, m.ContextReason)
		}
		if m.Size > m.PeakSize || m.PeakSize > 1<<30 {
			t.Errorf("num_ctx %s: size %d peak %d", v, m.Size, m.PeakSize)
		}
	}
}

// longSystem is a system prompt of about 400 tokens.
var longSystem = strings.Repeat("You answer questions about the weather. ", 50)

// A prompt over the context: Ollama's routes cut it (truncate true) and say so in headers, the log and
// PERF, or refuse it (truncate false); OpenAI's and Anthropic's refuse it in their own terms unless
// truncate (truncation "auto" on Responses) asks for the cut.
func TestPromptOverContext(t *testing.T) {
	ks := startKVServerWith(t, func(c *ServerConfig) { c.ContextLength = 128 })
	sys, _ := json.Marshal(longSystem)
	msgs := `[{"role":"system","content":` + string(sys) + `},{"role":"user","content":"Rain?"}]`

	// Ollama: cut, and said.
	resp, b := ks.do(t, "POST", "/api/chat", `{"model":"scripted","stream":false,"think":false,"options":{"num_predict":2},"messages":`+msgs+`}`)
	if resp.StatusCode != 200 {
		t.Fatalf("/api/chat: %d %s", resp.StatusCode, b)
	}
	var cr api.ChatResponse
	_ = json.Unmarshal(b, &cr)
	cut, _ := strconv.Atoi(resp.Header.Get(headerPromptTruncated))
	if cut <= 0 || resp.Header.Get(headerNumCtx) != "128" || cr.PromptEvalCount > 128 {
		t.Errorf("/api/chat: cut %q num_ctx %q prompt_eval_count %d", resp.Header.Get(headerPromptTruncated), resp.Header.Get(headerNumCtx), cr.PromptEvalCount)
	}
	if n, _ := strconv.Atoi(resp.Header.Get(headerPromptTokens)); n != cr.PromptEvalCount {
		t.Errorf("%s %d, prompt_eval_count %d", headerPromptTokens, n, cr.PromptEvalCount)
	}
	logs := ks.logs.String()
	if !strings.Contains(logs, "the prompt did not fit the context") || !regexp.MustCompile(`PERF: .*prompt_truncated=\d+`).MatchString(logs) {
		t.Errorf("no log or PERF for the cut:\n%s", logs)
	}
	// Streamed, the headers go out before the first line.
	resp, b = ks.do(t, "POST", "/api/chat", `{"model":"scripted","stream":true,"think":false,"options":{"num_predict":2},"messages":`+msgs+`}`)
	if resp.StatusCode != 200 || resp.Header.Get(headerPromptTruncated) == "" || !strings.Contains(string(b), `"done":true`) {
		t.Errorf("/api/chat streamed: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	resp, b = ks.do(t, "POST", "/api/chat", `{"model":"scripted","stream":false,"truncate":false,"messages":`+msgs+`}`)
	if resp.StatusCode != 400 || !strings.Contains(string(b), "num_ctx 128") {
		t.Errorf("/api/chat truncate false: %d %s", resp.StatusCode, b)
	}

	// OpenAI: context_length_exceeded, streamed or not.
	for _, stream := range []string{"false", "true"} {
		resp, b = ks.do(t, "POST", "/v1/chat/completions", `{"model":"scripted","stream":`+stream+`,"messages":`+msgs+`}`)
		var oe struct {
			Error struct{ Message, Type, Param, Code string }
		}
		_ = json.Unmarshal(b, &oe)
		if resp.StatusCode != 400 || oe.Error.Code != "context_length_exceeded" || oe.Error.Type != "invalid_request_error" ||
			oe.Error.Param != "messages" || !strings.Contains(oe.Error.Message, "maximum context length is 128 tokens") {
			t.Errorf("/v1/chat/completions stream %s: %d %s", stream, resp.StatusCode, b)
		}
	}
	resp, b = ks.do(t, "POST", "/v1/chat/completions", `{"model":"scripted","truncate":true,"max_tokens":2,"messages":`+msgs+`}`)
	if resp.StatusCode != 200 || resp.Header.Get(headerPromptTruncated) == "" {
		t.Errorf("/v1/chat/completions truncate true: %d %q %s", resp.StatusCode, resp.Header.Get(headerPromptTruncated), b)
	}
	resp, b = ks.do(t, "POST", "/v1/completions", `{"model":"scripted","prompt":`+string(sys)+`}`)
	if resp.StatusCode != 400 || !strings.Contains(string(b), `"context_length_exceeded"`) || !strings.Contains(string(b), `"param":"prompt"`) {
		t.Errorf("/v1/completions: %d %s", resp.StatusCode, b)
	}

	// Responses: truncation "disabled" (OpenAI's default) refuses, "auto" cuts.
	for _, stream := range []string{"false", "true"} {
		resp, b = ks.do(t, "POST", "/v1/responses", `{"model":"scripted","stream":`+stream+`,"instructions":`+string(sys)+`,"input":"Rain?"}`)
		if resp.StatusCode != 400 || !strings.Contains(string(b), `"context_length_exceeded"`) || !strings.Contains(string(b), `"param":"input"`) {
			t.Errorf("/v1/responses stream %s: %d %s", stream, resp.StatusCode, b)
		}
	}
	for _, stream := range []string{"false", "true"} {
		resp, b = ks.do(t, "POST", "/v1/responses", `{"model":"scripted","truncation":"auto","stream":`+stream+`,"max_output_tokens":2,"instructions":`+string(sys)+`,"input":"Rain?"}`)
		if resp.StatusCode != 200 || resp.Header.Get(headerPromptTruncated) == "" {
			t.Errorf("/v1/responses truncation auto, stream %s: %d %q %s", stream, resp.StatusCode, resp.Header.Get(headerPromptTruncated), b)
		}
	}
	resp, b = ks.do(t, "POST", "/v1/messages", `{"model":"scripted","max_tokens":2,"stream":true,"truncate":true,"system":`+string(sys)+`,"messages":[{"role":"user","content":"Rain?"}]}`)
	if resp.StatusCode != 200 || resp.Header.Get(headerPromptTruncated) == "" {
		t.Errorf("/v1/messages truncate true, streamed: %d %s", resp.StatusCode, b)
	}
	resp, b = ks.do(t, "POST", "/v1/chat/completions", `{"model":"scripted","stream":true,"truncate":true,"max_tokens":2,"messages":`+msgs+`}`)
	if resp.StatusCode != 200 || resp.Header.Get(headerPromptTruncated) == "" {
		t.Errorf("/v1/chat/completions truncate true, streamed: %d %s", resp.StatusCode, b)
	}

	// Anthropic: invalid_request_error "prompt is too long: N tokens > M maximum".
	for _, stream := range []string{"false", "true"} {
		resp, b = ks.do(t, "POST", "/v1/messages", `{"model":"scripted","max_tokens":4,"stream":`+stream+`,"system":`+string(sys)+`,"messages":[{"role":"user","content":"Rain?"}]}`)
		if resp.StatusCode != 400 || !regexp.MustCompile(`"type":"error","error":\{"type":"invalid_request_error","message":"prompt is too long: \d+ tokens (>|\\u003e) 127 maximum"`).Match(b) {
			t.Errorf("/v1/messages stream %s: %d %s", stream, resp.StatusCode, b)
		}
	}
	resp, b = ks.do(t, "POST", "/v1/messages", `{"model":"scripted","max_tokens":2,"truncate":true,"system":`+string(sys)+`,"messages":[{"role":"user","content":"Rain?"}]}`)
	if resp.StatusCode != 200 || resp.Header.Get(headerPromptTruncated) == "" {
		t.Errorf("/v1/messages truncate true: %d %s", resp.StatusCode, b)
	}
}

// A model keeps the context it loaded with when memory tightens afterwards: a later sequence's plan, read
// under warn pressure with little memory left, may choose a tighter layout, but the context every sequence
// may fill is the load's, and a prompt longer than what the later plan would fit is taken whole.
func TestContextKeptUnderLaterPressure(t *testing.T) {
	shape := scriptedShape(t)
	base, err := kvstore.Choose(kvstore.PolicyInput{Model: shape, NumCtx: 1024, Memory: sysmem.Info{Total: 16 << 30, Available: 12 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	ks := startKVServer(t)
	ks.sensor.info = sysmem.Info{Total: 16 << 30, Available: uint64(12<<30 - base.Free + 2*6000*base.KVTokenBytes), Source: "test"}
	ks.chat(t, "Weather?")
	loaded := ks.ps(t).ContextLength
	if loaded < 5000 {
		t.Fatalf("loaded with context %d", loaded)
	}
	// Now warn, and memory for ~600 tokens beside the loaded weights: a fresh plan would hold fewer
	// tokens than the prompt below.
	loadedFree := base.Free + base.Weights // free memory of a loaded model counts no weights again
	ks.sensor.mu.Lock()
	ks.sensor.info = sysmem.Info{Total: 16 << 30, Available: uint64(12<<30 + 2<<30 - loadedFree + 600*base.KVTokenBytes), Pressure: sysmem.Warn, Source: "test"}
	ks.sensor.mu.Unlock()
	later, err := kvstore.Choose(kvstore.PolicyInput{Model: shape, NumCtx: loaded, Memory: ks.sensor.info, Loaded: true})
	if err != nil || later.Context >= 1500 {
		t.Fatalf("the later plan: context %d, %v", later.Context, err)
	}
	prompt, _ := json.Marshal(strings.Repeat("Rain and wind over the hills tonight. ", 200))
	resp, b := ks.do(t, "POST", "/api/generate", `{"model":"scripted","stream":false,"raw":true,"options":{"num_predict":2},"prompt":`+string(prompt)+`}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var gr api.GenerateResponse
	_ = json.Unmarshal(b, &gr)
	if gr.PromptEvalCount < 1500 || resp.Header.Get(headerPromptTruncated) != "" || resp.Header.Get(headerNumCtx) != strconv.Itoa(loaded) {
		t.Errorf("prompt_eval_count %d, truncated %q, num_ctx %q (loaded %d, the later plan %d)", gr.PromptEvalCount,
			resp.Header.Get(headerPromptTruncated), resp.Header.Get(headerNumCtx), loaded, later.Context)
	}
	if m := ks.ps(t); m.ContextLength != loaded {
		t.Errorf("/api/ps context %d after the pressure rose, loaded with %d", m.ContextLength, loaded)
	}
}
