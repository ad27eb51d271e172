package e2e

// The programs people point at an Ollama server, run unmodified against `mlxg serve` on the trained
// qwen3-tiny (../shared/models): the real ollama CLI, Claude Code, Codex, the Vercel AI SDK's two
// providers and LangChain JS. scripts/test installs them into $MLXG_TESTDATA (agents/ from npm,
// ollama-cli/ built from the Go module proxy by scripts/ollamacli/build.sh).
//
// qwen3-tiny writes loosely English-like text and is no assistant: under an agent's long system prompt it
// rarely stops by itself, so these tests check what the server owes each client (the request accepted, a
// complete reply the client understands, a tool result carried back to the model), not what the model says.
// Every exchange goes through a recording proxy (recorder) so a failure shows what the client sent; with
// MLXG_E2E_CAPTURE=DIR the bodies are also written under DIR.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlxg/mlxg/internal/testdata"
)

const (
	tinyModel = "qwen3-tiny"
	// tinyNumPredict is the qwen3-tiny test model's own num_predict (a Modelfile PARAMETER): the bound on
	// replies to clients that send no token limit (Codex, `ollama run`), which this model would otherwise
	// continue for as long as the server lets it.
	tinyNumPredict = 48
	// agentMaxTokens is the limit passed to every client that takes one.
	agentMaxTokens = 48
	// tinyMaxContext is the trained maximum the test model claims: qwen3-tiny's own 4096 with a longer
	// max_position_embeddings, so that the agents' first requests (Claude Code's ~27K tokens) fit the
	// context the server sizes from memory, as they would a real model's. The text it writes past 4096
	// positions does not matter here.
	tinyMaxContext = 40960
)

var (
	tinyOnce sync.Once
	tinyErr  error
)

// startTiny starts the server (start) and creates qwen3-tiny in its store from the shared checkpoint, the
// way a user would: `mlxg create qwen3-tiny -f Modelfile` through the server.
func startTiny(t *testing.T) *server {
	t.Helper()
	agentsPass(t)
	dir := testdata.SharedModel(t, tinyModel)
	s := start(t)
	tinyOnce.Do(func() {
		long := filepath.Join(s.tmp, "qwen3-tiny-long")
		if tinyErr = longContextCopy(dir, long, tinyMaxContext); tinyErr != nil {
			return
		}
		mf := filepath.Join(s.tmp, "qwen3-tiny.Modelfile")
		if tinyErr = os.WriteFile(mf, fmt.Appendf(nil, "FROM %s\nPARAMETER num_predict %d\n", long, tinyNumPredict), 0o644); tinyErr != nil {
			return
		}
		if out, err := s.mlxg(t, "", "create", tinyModel, "-f", mf); err != nil {
			tinyErr = fmt.Errorf("mlxg create %s: %v\n%s", tinyModel, err, out)
		}
	})
	if tinyErr != nil {
		t.Log(s.logTail())
		t.Fatal(tinyErr)
	}
	return s
}

// longContextCopy writes into dst a checkpoint of src's files (linked) whose config.json claims a trained
// maximum of maxCtx positions.
func longContextCopy(src, dst string, maxCtx int) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() || e.Name() == "config.json" {
			continue
		}
		if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		return err
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	cfg["max_position_embeddings"] = maxCtx
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dst, "config.json"), out, 0o644)
}

// agentsPass skips the agent tests on scripts/test's second and third e2e passes (MLX backend, two ranks):
// they test the HTTP surface, which those passes share with the first.
func agentsPass(t *testing.T) {
	t.Helper()
	if backend() != "cpu" || ranks() != 1 {
		t.Skip("the agent clients run on the cpu backend's pass only")
	}
}

// agentsDir is where scripts/test installs the npm agents and SDKs.
func agentsDir() string { return filepath.Join(testdata.Dir(), "agents", "node_modules") }

// requireAsset fails (MLXG_REQUIRE_TESTDATA=1) or skips when path is missing.
func requireAsset(t *testing.T, what, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("MLXG_REQUIRE_TESTDATA") == "1" {
			t.Fatalf("%s missing at %s (scripts/test installs it)", what, path)
		}
		t.Skipf("%s missing at %s; run scripts/test", what, path)
	}
}

// agentBin returns an npm package's executable from agentsDir.
func agentBin(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(agentsDir(), ".bin", name)
	requireAsset(t, name, p)
	return p
}

// isolatedEnv is the environment for a client process: a fresh HOME and XDG dirs under home, no
// credentials or endpoints inherited from the caller, telemetry and update checks off, and every proxy
// variable pointing at a closed loopback port with loopback exempt, so that anything the client tries
// to reach beyond 127.0.0.1 fails at once instead of leaving the machine.
func isolatedEnv(home string, extra ...string) []string {
	drop := regexp.MustCompile(`^(?i:HOME|XDG_[A-Z_]+|ANTHROPIC_[A-Z_]+|CLAUDE_[A-Z_]+|OPENAI_[A-Z_]+|CODEX_[A-Z_]+|OLLAMA_[A-Z_]+|` +
		`[A-Z_]*PROXY|NODE_OPTIONS|NODE_PATH|LANGCHAIN_[A-Z_]+|LANGSMITH_[A-Z_]+|OTEL_[A-Z_]+)=`)
	var env []string
	for _, kv := range os.Environ() {
		if !drop.MatchString(kv) {
			env = append(env, kv)
		}
	}
	const dead = "http://127.0.0.1:9"
	env = append(env, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_CACHE_HOME="+filepath.Join(home, ".cache"), "XDG_DATA_HOME="+filepath.Join(home, ".local", "share"),
		"HTTP_PROXY="+dead, "HTTPS_PROXY="+dead, "ALL_PROXY="+dead, "http_proxy="+dead, "https_proxy="+dead, "all_proxy="+dead,
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
		"DO_NOT_TRACK=1", "DISABLE_TELEMETRY=1", "LANGCHAIN_TRACING_V2=false", "LANGSMITH_TRACING=false", "OTEL_SDK_DISABLED=true")
	return append(env, extra...)
}

// runClient runs a client with a deadline and returns its stdout and stderr.
func runClient(t *testing.T, timeout time.Duration, dir string, env []string, stdin string, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin = strings.NewReader(stdin)
	cmd.WaitDelay = 5 * time.Second
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	start := time.Now()
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%s did not finish within %v: %w", filepath.Base(name), timeout, err)
	}
	t.Logf("%s %s: %v in %.1fs", filepath.Base(name), strings.Join(args, " "), err, time.Since(start).Seconds())
	return o.String(), e.String(), err
}

// exchange is one request through the recorder.
type exchange struct {
	Method, Path string // Path keeps the query
	Body         []byte // the request body as the client sent it
	Status       int
	Resp         []byte      // the response body as the client received it
	Header       http.Header // the response's headers (mlxg's)
	Canned       bool        // answered by the test instead of mlxg
}

func (x *exchange) String() string {
	who := "mlxg"
	if x.Canned {
		who = "canned"
	}
	return fmt.Sprintf("%s %s (%d bytes) -> %d from %s", x.Method, x.Path, len(x.Body), x.Status, who)
}

// recorder is a reverse proxy in front of mlxg that keeps every request and response body. answer, when
// set, sees each request first and may answer it itself (returning true): the tool round trips use it to
// make the model's first turn a tool call.
type recorder struct {
	t      *testing.T
	URL    string
	answer func(x *exchange, w http.ResponseWriter) bool

	mu       sync.Mutex
	ex       []*exchange
	inflight sync.WaitGroup
}

func newRecorder(t *testing.T, s *server) *recorder {
	t.Helper()
	target, err := url.Parse(s.base)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{t: t}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	rp.ModifyResponse = func(resp *http.Response) error {
		x := resp.Request.Context().Value(exchangeKey{}).(*exchange)
		r.mu.Lock()
		x.Status, x.Header = resp.StatusCode, resp.Header.Clone()
		r.mu.Unlock()
		resp.Body = teeBody{io.TeeReader(resp.Body, lockedWriter{&r.mu, &x.Resp}), resp.Body}
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.inflight.Add(1)
		defer r.inflight.Done()
		body, _ := io.ReadAll(req.Body)
		x := &exchange{Method: req.Method, Path: req.URL.RequestURI(), Body: body}
		r.mu.Lock()
		r.ex = append(r.ex, x)
		r.mu.Unlock()
		if r.answer != nil {
			rec := &capturingWriter{ResponseWriter: w, mu: &r.mu, x: x}
			if r.answer(x, rec) {
				r.mu.Lock()
				x.Canned = true
				if x.Status == 0 {
					x.Status = http.StatusOK
				}
				r.mu.Unlock()
				return
			}
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		rp.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), exchangeKey{}, x)))
	}))
	r.URL = srv.URL
	t.Cleanup(func() {
		srv.Close()
		r.save()
	})
	return r
}

type exchangeKey struct{}

type teeBody struct {
	io.Reader
	io.Closer
}

type lockedWriter struct {
	mu  *sync.Mutex
	dst *[]byte
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	*l.dst = append(*l.dst, p...)
	l.mu.Unlock()
	return len(p), nil
}

// capturingWriter records what a canned answer writes.
type capturingWriter struct {
	http.ResponseWriter
	mu *sync.Mutex
	x  *exchange
}

func (c *capturingWriter) WriteHeader(code int) {
	c.mu.Lock()
	c.x.Status = code
	c.mu.Unlock()
	c.ResponseWriter.WriteHeader(code)
}

func (c *capturingWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.x.Resp = append(c.x.Resp, p...)
	c.mu.Unlock()
	return c.ResponseWriter.Write(p)
}

func (c *capturingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// exchanges returns what went through so far, once the requests in flight have ended (a client that exits
// may leave its last response still streaming for a moment).
func (r *recorder) exchanges() []*exchange {
	done := make(chan struct{})
	go func() { r.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*exchange, len(r.ex))
	for i, x := range r.ex {
		c := *x
		c.Body, c.Resp = append([]byte(nil), x.Body...), append([]byte(nil), x.Resp...)
		out[i] = &c
	}
	return out
}

// to returns the exchanges whose path (without the query) is path.
func (r *recorder) to(path string) []*exchange {
	var out []*exchange
	for _, x := range r.exchanges() {
		if p, _, _ := strings.Cut(x.Path, "?"); p == path {
			out = append(out, x)
		}
	}
	return out
}

// summary lists the exchanges, with the body of every error answer, for a failure message.
func (r *recorder) summary() string {
	var b strings.Builder
	for i, x := range r.exchanges() {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, x)
		if x.Status >= 400 {
			fmt.Fprintf(&b, "     %s\n", clip(string(x.Resp), 600))
		}
	}
	return b.String()
}

// save writes every exchange under $MLXG_E2E_CAPTURE/<test name>/ when that is set.
func (r *recorder) save() {
	dir := os.Getenv("MLXG_E2E_CAPTURE")
	if dir == "" {
		return
	}
	dir = filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(r.t.Name()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.t.Log(err)
		return
	}
	for i, x := range r.exchanges() {
		p, _, _ := strings.Cut(x.Path, "?")
		name := fmt.Sprintf("%03d_%s_%s", i+1, x.Method, strings.ReplaceAll(strings.Trim(p, "/"), "/", "_"))
		if x.Canned {
			name += "_canned"
		}
		_ = os.WriteFile(filepath.Join(dir, name+".req.json"), x.Body, 0o644)
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s.resp.%d", name, x.Status)), x.Resp, 0o644)
	}
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// sse answers with Server-Sent Events: each event is a JSON object whose first key is "type", which also
// names the event (Anthropic's and OpenAI's Responses streams both name their events).
func sse(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	for _, ev := range events {
		typ := regexp.MustCompile(`"type":"([^"]+)"`).FindStringSubmatch(ev)
		if typ != nil {
			fmt.Fprintf(w, "event: %s\n", typ[1])
		}
		fmt.Fprintf(w, "data: %s\n\n", ev)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
}
