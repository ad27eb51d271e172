package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/api/openai"
	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/sched"
)

// /api/version reports an Ollama release number clients accept (some refuse a development version or
// anything below 0.6.4) and mlxg's own version beside it.
func TestVersionIsOllamas(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	resp, err := http.Get(ts.URL + "/api/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v api.VersionResponse
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if v.Version != api.OllamaVersion || v.MLXGVersion != "test" {
		t.Fatalf("/api/version = %+v", v)
	}
	var major, minor, patch int
	if n, _ := fmt.Sscanf(v.Version, "%d.%d.%d", &major, &minor, &patch); n != 3 || major != 0 || minor < 7 {
		t.Fatalf("version %q is not an Ollama release of at least 0.7.0", v.Version)
	}
}

// postJSON posts body and decodes a non-streamed JSON answer into out (when not nil).
func (ts *testServer) postJSON(t *testing.T, path, body string, out any) int {
	t.Helper()
	resp, b := ts.post(t, path, body)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v: %s", path, err, b)
		}
	}
	if resp.StatusCode != 200 {
		t.Logf("%s: %d %s", path, resp.StatusCode, b)
	}
	return resp.StatusCode
}

// errorOf posts body and returns the status and Ollama's {"error": ...} message.
func (ts *testServer) errorOf(t *testing.T, path, body string) (int, string) {
	t.Helper()
	resp, b := ts.post(t, path, body)
	var e struct{ Error string }
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Error
}

const createMine = `{"model":"mine","from":"scripted","parameters":{"num_ctx":2048,"stop":["sunny"],"temperature":0.5},
	"system":"You are terse.","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello."}],"license":"MIT-0"}`

// /api/create FROM a model with a Modelfile's PARAMETER, SYSTEM, MESSAGE and LICENSE: show reports them,
// and generate and chat run with them (num_ctx loads the model, the stop word cuts the reply, the system
// prompt and messages reach the prompt), the request's own options still winning.
func TestCreateFromModel(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	resp, body := ts.post(t, "/api/create", createMine)
	st := lines[api.ProgressResponse](t, body)
	if resp.StatusCode != 200 || len(st) < 2 || st[len(st)-1].Status != "success" {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	var show api.ShowResponse
	if ts.postJSON(t, "/api/show", `{"model":"mine"}`, &show) != 200 {
		t.Fatal("show")
	}
	for _, want := range []string{"num_ctx          2048", `stop             "sunny"`, "temperature      0.5"} {
		if !strings.Contains(show.Parameters, want) {
			t.Errorf("show parameters lack %q:\n%s", want, show.Parameters)
		}
	}
	if show.System != "You are terse." || len(show.Messages) != 2 || show.Messages[1].Content != "Hello." ||
		!strings.Contains(show.License, "MIT-0") || show.Details.ParentModel != "scripted" ||
		!strings.Contains(show.Modelfile, "PARAMETER num_ctx 2048") || !strings.Contains(show.Modelfile, `SYSTEM """You are terse."""`) {
		t.Errorf("show: %+v", show)
	}
	for _, c := range []string{"completion", "tools", "thinking"} {
		if !slices.Contains(show.Capabilities, c) {
			t.Errorf("capabilities %v lack %s", show.Capabilities, c)
		}
	}
	if slices.Contains(show.Capabilities, "embedding") { // the ollama CLI would treat it as an embedding model
		t.Errorf("a chat model's capabilities %v list embedding", show.Capabilities)
	}
	var base api.ShowResponse
	if ts.postJSON(t, "/api/show", `{"model":"scripted"}`, &base) != 200 || base.System != "" || strings.Contains(base.Parameters, "num_ctx") {
		t.Errorf("the FROM model changed: %+v", base)
	}

	chat := func(model, extra string) api.ChatResponse {
		var cr api.ChatResponse
		if code := ts.postJSON(t, "/api/chat", `{"model":"`+model+`","stream":false,"think":false,"messages":[{"role":"user","content":"Weather?"}]`+extra+`}`, &cr); code != 200 {
			t.Fatalf("chat %s: %d", model, code)
		}
		return cr
	}
	plain, mine := chat("scripted", ""), chat("mine", "")
	if plain.Message.Content != apitest.PlainReply || mine.Message.Content != "The weather in Paris is " || mine.DoneReason != "stop" {
		t.Fatalf("scripted %q, mine %q (%s): the stop word did not apply", plain.Message.Content, mine.Message.Content, mine.DoneReason)
	}
	if mine.PromptEvalCount <= plain.PromptEvalCount+8 {
		t.Errorf("mine's prompt has %d tokens, the plain one %d: the system prompt and messages are missing", mine.PromptEvalCount, plain.PromptEvalCount)
	}
	if own := chat("mine", `,"options":{"stop":["Paris"]}`); own.Message.Content != "The weather in " {
		t.Errorf("the request's stop did not win: %q", own.Message.Content)
	}
	// A chat that brings its own system message keeps it (the model's is not added): the prompt is shorter.
	var sys api.ChatResponse
	ts.postJSON(t, "/api/chat", `{"model":"mine","stream":false,"think":false,"messages":[{"role":"system","content":"x"},{"role":"user","content":"Weather?"}]}`, &sys)
	if sys.PromptEvalCount >= mine.PromptEvalCount || sys.Message.Content != "The weather in Paris is " {
		t.Errorf("own system message: %d tokens (model's system: %d), %q", sys.PromptEvalCount, mine.PromptEvalCount, sys.Message.Content)
	}
	var gen api.GenerateResponse
	ts.postJSON(t, "/api/generate", `{"model":"mine","stream":false,"think":false,"prompt":"Weather?"}`, &gen)
	if gen.Response != "The weather in Paris is " || gen.PromptEvalCount <= plain.PromptEvalCount {
		t.Errorf("generate on mine: %q, %d prompt tokens", gen.Response, gen.PromptEvalCount)
	}
	var ps api.ProcessResponse
	resp2, err := http.Get(ts.URL + "/api/ps")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp2.Body).Decode(&ps)
	resp2.Body.Close()
	if !slices.ContainsFunc(ps.Models, func(m api.ProcessModelResponse) bool { return m.Name == "mine:latest" && m.ContextLength == 2048 }) {
		t.Errorf("ps: %+v, want mine:latest loaded with num_ctx 2048", ps.Models)
	}
	// OpenAI's chat uses the created model's parameters too.
	resp, body = ts.post(t, "/v1/chat/completions", `{"model":"mine","reasoning_effort":"none","messages":[{"role":"user","content":"Weather?"}]}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"content":"The weather in Paris is "`) {
		t.Errorf("/v1/chat/completions on mine: %d %s", resp.StatusCode, body)
	}
	// FROM a created model layers on it; stream false answers one object.
	var done api.ProgressResponse
	if ts.postJSON(t, "/api/create", `{"model":"mine2","from":"mine","stream":false,"parameters":{"stop":["Paris"]},"license":["second"]}`, &done) != 200 || done.Status != "success" {
		t.Fatalf("create mine2: %+v", done)
	}
	ts.postJSON(t, "/api/show", `{"model":"mine2"}`, &show)
	if !strings.Contains(show.Parameters, "num_ctx          2048") || !strings.Contains(show.Parameters, `"Paris"`) || strings.Contains(show.Parameters, "sunny") ||
		show.System != "You are terse." || !strings.Contains(show.License, "MIT-0\nsecond") {
		t.Errorf("mine2 show: %+v", show)
	}
	// Deleting the created model leaves the FROM model.
	if resp, _ := ts.post(t, "/api/delete", `{"model":"mine"}`); resp.StatusCode != 200 {
		t.Fatalf("delete mine: %d", resp.StatusCode)
	}
	if code := ts.postJSON(t, "/api/show", `{"model":"scripted"}`, nil); code != 200 {
		t.Fatalf("scripted after deleting mine: %d", code)
	}
}

func TestCreateRejects(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	for _, c := range []struct {
		body   string
		status int
		msg    string
	}{
		{`{"model":"x","from":"scripted","template":"{{ .Prompt }}"}`, 400, "TEMPLATE is not supported"},
		{`{"model":"x","from":"scripted","adapters":{"a.safetensors":"sha256:` + strings.Repeat("0", 64) + `"}}`, 400, "ADAPTER is not supported"},
		{`{"model":"x","from":"scripted","parameters":{"num_gpus":1}}`, 400, "PARAMETER num_gpus: unknown parameter"},
		{`{"model":"x","from":"scripted","parameters":{"num_ctx":"big"}}`, 400, `"num_ctx" must be of type integer`},
		{`{"model":"x","from":"scripted","parameters":{"num_ctx":0}}`, 400, "num_ctx is 0"},
		{`{"model":"x","from":"scripted","messages":[{"role":"tool","content":"x"}]}`, 400, "MESSAGE 1: role"},
		{`{"model":"x","from":"scripted","license":5}`, 400, "license must be"},
		{`{"model":"x","from":"scripted","quantize":"q9"}`, 400, "quantize"},
		{`{"model":"x","from":"scripted","requires":"99.0.0"}`, 400, "requires Ollama 99.0.0"},
		{`{"model":"x","from":"scripted","renderer":"qwen3"}`, 400, "RENDERER"},
		{`{"model":"x"}`, 400, "neither 'from' or 'files'"},
		{`{"from":"scripted"}`, 400, "model is required"},
		{`{"model":"../x","from":"scripted"}`, 400, ".."},
		{`{"model":"org/x","from":"scripted"}`, 400, "without '/'"},
		{`{"model":"x","from":"nosuchmodel"}`, 404, "nosuchmodel"},
		{`{"model":"x","files":{"../config.json":"sha256:` + strings.Repeat("a", 64) + `"}}`, 400, "plain file name"},
		{`{"model":"x","files":{"model.gguf":"sha256:` + strings.Repeat("a", 64) + `"}}`, 400, "GGUF files are not supported"},
		{`{"model":"x","files":{"config.json":"sha256:` + strings.Repeat("a", 64) + `"}}`, 400, "upload it first"},
		{`{"model":"x","files":{"config.json":"md5:abc"}}`, 400, "invalid digest"},
	} {
		status, msg := ts.errorOf(t, "/api/create", c.body)
		if status != c.status || !strings.Contains(msg, c.msg) {
			t.Errorf("%s: %d %q, want %d with %q", c.body, status, msg, c.status, c.msg)
		}
	}
	if code := ts.postJSON(t, "/api/show", `{"model":"x"}`, nil); code != 404 {
		t.Errorf("a refused create left a model: show %d", code)
	}
}

func blobDigest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func blobReq(t *testing.T, ts *testServer, method, digest string, body []byte) int {
	t.Helper()
	req, _ := http.NewRequest(method, ts.URL+"/api/blobs/"+digest, bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// /api/blobs/:digest (HEAD, POST with the sha256 checked) and /api/create from uploaded files, as
// `ollama create` does FROM a local folder: the checkpoint's files, larger than the request-body limit.
func TestBlobsAndCreateFromFiles(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	data := []byte("some blob")
	d := blobDigest(data)
	if c := blobReq(t, ts, "HEAD", d, nil); c != 404 {
		t.Errorf("HEAD of a missing blob: %d", c)
	}
	if c := blobReq(t, ts, "POST", d, []byte("other bytes")); c != 400 {
		t.Errorf("POST with the wrong digest: %d", c)
	}
	if c := blobReq(t, ts, "HEAD", d, nil); c != 404 {
		t.Errorf("a mismatched upload was kept: %d", c)
	}
	if c := blobReq(t, ts, "POST", d, data); c != 201 {
		t.Errorf("POST: %d", c)
	}
	if c := blobReq(t, ts, "HEAD", d, nil); c != 200 {
		t.Errorf("HEAD after POST: %d", c)
	}
	if c := blobReq(t, ts, "POST", d, data); c != 200 {
		t.Errorf("POST again: %d", c)
	}
	for _, bad := range []string{"sha256:abc", "md5:" + strings.Repeat("0", 64), "sha256:" + strings.Repeat("G", 64), "sha256:" + strings.Repeat("A", 64)} {
		if c := blobReq(t, ts, "POST", bad, data); c != 400 {
			t.Errorf("POST %s: %d, want 400", bad, c)
		}
	}
	if c := blobReq(t, ts, "POST", "sha256:..%2F..%2Fx", data); c != 400 && c != 404 { // never a file outside the blobs
		t.Errorf("POST with a path in the digest: %d", c)
	}

	ckpt := scriptedCheckpoint(t)
	files := map[string]string{}
	ents, _ := os.ReadDir(ckpt)
	big := false
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(ckpt, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		big = big || len(b) > 1<<20 // the test server's body limit
		files[e.Name()] = blobDigest(b)
		if c := blobReq(t, ts, "POST", files[e.Name()], b); c != 201 {
			t.Fatalf("upload %s: %d", e.Name(), c)
		}
	}
	if !big {
		t.Log("no checkpoint file is over the body limit")
	}
	req, _ := json.Marshal(map[string]any{"model": "uploaded", "files": files, "parameters": map[string]any{"stop": []string{"Paris"}}, "stream": false})
	var done api.ProgressResponse
	if code := ts.postJSON(t, "/api/create", string(req), &done); code != 200 || done.Status != "success" {
		t.Fatalf("create from files: %d %+v", code, done)
	}
	if c := blobReq(t, ts, "HEAD", files["config.json"], nil); c != 404 {
		t.Errorf("an upload stayed after the create that used it: HEAD %d", c)
	}
	var cr api.ChatResponse
	ts.postJSON(t, "/api/chat", `{"model":"uploaded","stream":false,"think":false,"messages":[{"role":"user","content":"Weather?"}]}`, &cr)
	if cr.Message.Content != "The weather in " {
		t.Errorf("chat with the uploaded model: %+v", cr)
	}
	var show api.ShowResponse
	if ts.postJSON(t, "/api/show", `{"model":"uploaded"}`, &show) != 200 || show.Details.Family != "llama" {
		t.Errorf("show uploaded: %+v", show)
	}
}

// truncate false: a prompt over num_ctx is a 400 (not silently cut); shift false: generation stops at a
// full context with done_reason "length" instead of shifting it and going on.
func TestTruncateAndShift(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	long := strings.Repeat("word ", 200)
	status, msg := ts.errorOf(t, "/api/generate", `{"model":"scripted","raw":true,"stream":false,"truncate":false,"prompt":"`+long+`","options":{"num_ctx":64}}`)
	if status != 400 || !strings.Contains(msg, "num_ctx 64") {
		t.Errorf("truncate false, long prompt: %d %q", status, msg)
	}
	status, msg = ts.errorOf(t, "/api/chat", `{"model":"scripted","stream":false,"truncate":false,"messages":[{"role":"user","content":"`+long+`"}],"options":{"num_ctx":64}}`)
	if status != 400 || !strings.Contains(msg, "num_ctx 64") {
		t.Errorf("truncate false, long chat: %d %q", status, msg)
	}
	var gen api.GenerateResponse
	if ts.postJSON(t, "/api/generate", `{"model":"scripted","raw":true,"stream":false,"prompt":"`+long+`","options":{"num_ctx":64,"num_predict":1}}`, &gen) != 200 || gen.PromptEvalCount >= 64 {
		t.Errorf("truncate default: %+v", gen)
	}
	// A prompt outside every script makes the model repeat one token until stopped.
	run := func(shift string) api.GenerateResponse {
		var g api.GenerateResponse
		if ts.postJSON(t, "/api/generate", `{"model":"scripted","raw":true,"stream":false,"prompt":"zebra"`+shift+`,"options":{"num_ctx":64,"num_predict":100,"temperature":0}}`, &g) != 200 {
			t.Fatal("generate")
		}
		return g
	}
	if g := run(`,"shift":false`); g.DoneReason != "length" || g.EvalCount+g.PromptEvalCount > 65 || g.EvalCount < 32 { // the last token is sampled, never fed
		t.Errorf("shift false: %d tokens after %d, %s", g.EvalCount, g.PromptEvalCount, g.DoneReason)
	}
	if g := run(""); g.EvalCount != 100 || g.DoneReason != "length" {
		t.Errorf("shift default: %d tokens, %s; want 100 (the context shifted)", g.EvalCount, g.DoneReason)
	}
}

// think "low"/"medium"/"high" reach the chat template as reasoning_effort (beside enable_thinking), so a
// template that reads the level acts on it; true and false keep working.
func TestThinkLevels(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	src := scriptedCheckpoint(t)
	dir := filepath.Join(t.TempDir(), "effort")
	os.MkdirAll(dir, 0o755)
	ents, _ := os.ReadDir(src)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(src, e.Name()))
		if e.Name() == "tokenizer_config.json" {
			var cfg map[string]any
			json.Unmarshal(b, &cfg)
			tmpl := cfg["chat_template"].(string)
			// Low effort skips thinking, as gpt-oss-style templates do with their level.
			old := "enable_thinking is false"
			if !strings.Contains(tmpl, old) {
				t.Fatalf("the Qwen3 template changed: %q not found", old)
			}
			cfg["chat_template"] = strings.Replace(tmpl, old, `enable_thinking is false or (reasoning_effort is defined and reasoning_effort == "low")`, 1)
			b, _ = json.Marshal(cfg)
		}
		os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644)
	}
	n, _ := registry.ParseName("effort")
	if _, err := ts.srv.cfg.Store.ImportDir(context.Background(), n, dir); err != nil {
		t.Fatal(err)
	}
	for think, wantThinking := range map[string]bool{`"low"`: false, `"medium"`: true, `"high"`: true, `true`: true, `false`: false} {
		var cr api.ChatResponse
		if ts.postJSON(t, "/api/chat", `{"model":"effort","stream":false,"think":`+think+`,"messages":[{"role":"user","content":"Weather?"}]}`, &cr) != 200 {
			t.Fatalf("think %s", think)
		}
		if got := cr.Message.Thinking == apitest.ToolThinking; got != wantThinking || (!wantThinking && cr.Message.Content != apitest.PlainReply) {
			t.Errorf("think %s: thinking %q, content %q", think, cr.Message.Thinking, cr.Message.Content)
		}
	}
	for effort, wantThinking := range map[string]bool{"low": false, "high": true} {
		resp, body := ts.post(t, "/v1/chat/completions", `{"model":"effort","reasoning_effort":"`+effort+`","messages":[{"role":"user","content":"Weather?"}]}`)
		if got := strings.Contains(string(body), apitest.ToolThinking); resp.StatusCode != 200 || got != wantThinking {
			t.Errorf("/v1/chat/completions reasoning_effort %s: %d %s", effort, resp.StatusCode, body)
		}
	}
	if status, msg := ts.errorOf(t, "/api/chat", `{"model":"effort","think":"extreme","messages":[{"role":"user","content":"x"}]}`); status != 400 || !strings.Contains(msg, "invalid think value") {
		t.Errorf("think extreme: %d %q", status, msg)
	}
}

// OpenAI's reasoning_effort (chat) and reasoning.effort (Responses) carry the level to the template too.
func TestOpenAIReasoningEffortLevels(t *testing.T) {
	for effort, want := range map[string]any{"low": "low", "medium": "medium", "high": "high", "xhigh": "max", "none": false, "minimal": false} {
		e := effort
		if got := oaiThink(nil, &e); got == nil || got.Value != want {
			t.Errorf("reasoning_effort %q: %+v, want %v", effort, got, want)
		}
		if got := oaiThink(&openai.Reasoning{Effort: effort}, nil); got == nil || got.Value != want {
			t.Errorf("reasoning.effort %q: %+v, want %v", effort, got, want)
		}
	}
	if got := oaiThink(nil, nil); got != nil {
		t.Errorf("no effort: %+v, want the model's default", got)
	}
}

// capabilities: insert where the tokenizer has fill-in-the-middle tokens (Qwen3's), not elsewhere (Llama
// 3.1's); embedding for embedding models alone (the ollama CLI's run prints an embedding for a model that
// lists it), which a sentence-transformers pooling stage, an architecture without a head or the Hub's
// pipeline tag tell.
func TestShowCapabilities(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "llama")
	if err := apitest.WriteScripted(dir, testdata.Tokenizer(t, "llama3_1"), []apitest.Script{{After: "\n\n", Reply: "Hi."}}); err != nil {
		t.Fatal(err)
	}
	imp := func(name, dir string) {
		t.Helper()
		n, _ := registry.ParseName(name)
		if _, err := ts.srv.cfg.Store.ImportDir(context.Background(), n, dir); err != nil {
			t.Fatal(err)
		}
	}
	imp("llama", dir)
	// Embedding models: the scripted checkpoint with what an embedding model's files say.
	variant := func(name string, edit func(dir string)) {
		t.Helper()
		d := filepath.Join(tmp, name)
		if err := os.CopyFS(d, os.DirFS(scriptedCheckpoint(t))); err != nil {
			t.Fatal(err)
		}
		edit(d)
		imp(name, d)
	}
	write := func(path, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	variant("pooled", func(d string) {
		write(filepath.Join(d, "modules.json"), `[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`)
		write(filepath.Join(d, "1_Pooling", "config.json"), `{"pooling_mode_lasttoken":true}`)
	})
	variant("headless", func(d string) {
		cfg, err := os.ReadFile(filepath.Join(d, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		_ = json.Unmarshal(cfg, &m)
		m["architectures"] = []string{"Qwen3Model"}
		cfg, _ = json.Marshal(m)
		write(filepath.Join(d, "config.json"), string(cfg))
	})
	variant("tagged", func(d string) {
		write(filepath.Join(d, "README.md"), "---\nlicense: apache-2.0\npipeline_tag: feature-extraction\n---\n# An embedding model\n")
	})
	for model, want := range map[string][]string{
		"scripted": {"completion", "tools", "thinking", "insert"},
		"llama":    {"completion"},
		"pooled":   {"embedding"},
		"headless": {"embedding"},
		"tagged":   {"embedding"},
	} {
		var show api.ShowResponse
		if ts.postJSON(t, "/api/show", `{"model":"`+model+`"}`, &show) != 200 || !slices.Equal(show.Capabilities, want) {
			t.Errorf("%s: capabilities %v, want %v", model, show.Capabilities, want)
		}
	}
}

// Pulling a model made on this machine (it has no remote) succeeds at once when it is here, streamed and
// not: Codex pulls the model it is given before it uses it.
func TestPullLocalModel(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	for _, name := range []string{"scripted", "scripted:latest"} {
		resp, body := ts.post(t, "/api/pull", `{"model":"`+name+`"}`)
		got := lines[api.ProgressResponse](t, body)
		if resp.StatusCode != 200 || len(got) == 0 || got[len(got)-1].Status != "success" {
			t.Errorf("streamed pull of %s: %d %s", name, resp.StatusCode, body)
		}
		var one api.ProgressResponse
		if code := ts.postJSON(t, "/api/pull", `{"model":"`+name+`","stream":false}`, &one); code != 200 || one.Status != "success" {
			t.Errorf("pull of %s: %d %+v", name, code, one)
		}
	}
	if code, msg := ts.errorOf(t, "/api/pull", `{"model":"nothere","stream":false}`); code < 400 {
		t.Errorf("pull of an unknown bare name: %d %s", code, msg)
	}
}

// A generation without a limit ends after ten context windows of tokens, as Ollama bounds it (the scripted
// model repeats one token for ever after a prompt outside its scripts); a limit above that is cut to it.
func TestOpenEndedGenerationBounded(t *testing.T) {
	for _, c := range []struct{ n, ctx, want int }{{-1, 4096, 40960}, {100, 4096, 100}, {50000, 4096, 40960}, {-2, 4096, -2}, {-1, 0, -1}} {
		if got := boundNumPredict(c.n, c.ctx); got != c.want {
			t.Errorf("boundNumPredict(%d, %d) = %d, want %d", c.n, c.ctx, got, c.want)
		}
	}
	ts := newTestServer(t, sched.Config{})
	for _, body := range []string{
		`{"model":"scripted","prompt":"zz qq","raw":true,"stream":false,"options":{"num_ctx":32,"temperature":0}}`,
		`{"model":"scripted","prompt":"zz qq","raw":true,"stream":false,"options":{"num_ctx":32,"temperature":0,"num_predict":100000}}`,
	} {
		var r api.GenerateResponse
		if code := ts.postJSON(t, "/api/generate", body, &r); code != 200 || r.DoneReason != "length" || r.EvalCount != 320 {
			t.Errorf("%s: %d done_reason %q eval_count %d, want length after 320", body, code, r.DoneReason, r.EvalCount)
		}
	}
}

// The chat template's turn markers end a generation as its end-of-sequence token does: with qwen3-tiny's
// template and tokenizer, a model that opens a new turn ("<|im_start|>", a special token that decodes to
// nothing) ends its reply there instead of adding the turn's text to it.
func TestTurnMarkersEndGeneration(t *testing.T) {
	tiny := testdata.SharedModel(t, "qwen3-tiny")
	info, err := registry.ReadInfo(tiny)
	if err != nil {
		t.Fatal(err)
	}
	if got := turnMarkers(info.ChatTemplate); !slices.Equal(got, []string{"<|im_start|>", "<|im_end|>"}) {
		t.Fatalf("qwen3-tiny's turn markers %q", got)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	// With thinking off the prompt ends in "\n\n" (after the empty think block).
	if err := apitest.WriteScripted(dir, tiny, []apitest.Script{{After: "\n\n", Reply: "Hi.<|im_start|>assistant"}}); err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, sched.Config{})
	n, _ := registry.ParseName("opener")
	if _, err := ts.srv.cfg.Store.ImportDir(context.Background(), n, dir); err != nil {
		t.Fatal(err)
	}
	var r api.ChatResponse
	if code := ts.postJSON(t, "/api/chat", `{"model":"opener","think":false,"stream":false,"messages":[{"role":"user","content":"Hello"}]}`, &r); code != 200 ||
		r.Message.Content != "Hi." || r.DoneReason != "stop" {
		t.Fatalf("%d: content %q done_reason %q", code, r.Message.Content, r.DoneReason)
	}
	var oc openai.ChatCompletion
	if code := ts.postJSON(t, "/v1/chat/completions", `{"model":"opener","reasoning_effort":"none","messages":[{"role":"user","content":"Hello"}]}`, &oc); code != 200 ||
		string(oc.Choices[0].Message.Content) != `"Hi."` || *oc.Choices[0].FinishReason != "stop" {
		t.Fatalf("%d: %+v", code, oc)
	}
}
