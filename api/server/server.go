package server

// The HTTP server: Ollama's /api/* and OpenAI's /v1/* over the model store (registry), the scheduler
// (runner/sched) and a Loader that turns a model directory into a running Model.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mlxg/mlxg/api/anthropic"
	"github.com/mlxg/mlxg/api/openai"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/sched"
	"github.com/mlxg/mlxg/vision"
)

// ServerConfig configures a Server. Store and Loader are required.
type ServerConfig struct {
	Store  *registry.Store
	Loader Loader
	Sched  sched.Config
	// Origins are the browser origins allowed besides loopback ones (OLLAMA_ORIGINS / MLXG_ORIGINS):
	// "https://example.com", "http://*.lan:*", "*" (any), "app://*"...
	Origins []string
	// MaxBodyBytes bounds a request body (default 32 MiB).
	MaxBodyBytes int64
	// ContextLength is the default num_ctx (MLXG_CONTEXT_LENGTH); 0: each model's context is sized
	// from memory when it loads (kvstore's auto context), up to its trained maximum.
	ContextLength int
	// NumDraft is the default num_draft, the most tokens speculative decoding drafts a step
	// (MLXG_NUM_DRAFT): 0 means runner.DefaultNumDraft, negative turns it off.
	NumDraft int
	// DraftModel names the draft model of every model whose Modelfile names none (PARAMETER
	// draft_model; MLXG_DRAFT_MODEL, mlxg serve --draft-model): a smaller model in the store with
	// the same tokenizer, loaded with its target to draft tokens for speculative decoding. "": none.
	// A model cannot draft for itself: a draft model loads without one.
	DraftModel string
	// Version is mlxg's version, which /api/version reports as "mlxg_version" ("version" is OllamaVersion).
	Version string
	Pull    registry.PullOptions
	Logger  *slog.Logger
	// NoDashboard turns off the web dashboard at /dashboard (MLXG_DASHBOARD=0); /api/status stays.
	NoDashboard bool
}

// numDraft is the server's default num_draft.
func (c ServerConfig) numDraft() int {
	switch {
	case c.NumDraft < 0:
		return 0
	case c.NumDraft == 0:
		return runner.DefaultNumDraft
	}
	return c.NumDraft
}

// Server serves the Ollama and OpenAI APIs. Make it with NewServer.
type Server struct {
	cfg    ServerConfig
	models *Models
	sched  *sched.Scheduler
	log    *slog.Logger
	gin    *gin.Engine
	hosts  hostGuard   // the Host-header check against DNS rebinding (hosts.go)
	status statusState // the latest requests, for /api/status (status.go)

	// inflight counts requests that may run a model; Shutdown waits for them.
	inflight sync.WaitGroup
	// stop is cancelled by Shutdown when its deadline passes: generation in flight ends.
	stop   context.Context
	cancel context.CancelFunc
}

// NewServer makes a server; it loads nothing until a request asks for a model.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Store == nil || cfg.Loader == nil {
		return nil, errors.New("server.NewServer: Store and Loader are required")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	cfg.ContextLength = max(cfg.ContextLength, 0)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, models: &Models{Store: cfg.Store, PullOptions: cfg.Pull}, sched: sched.New(cfg.Sched), log: cfg.Logger}
	s.stop, s.cancel = context.WithCancel(context.Background())
	gin.SetMode(gin.ReleaseMode)
	g := gin.New()
	g.ContextWithFallback = true // c.Done()/c.Err() follow the request's context
	g.Use(s.accessLog, s.recoverer, s.checkHost, s.cors, s.limitBody)
	g.HandleMethodNotAllowed = true
	g.NoRoute(func(c *gin.Context) { abort(c, http.StatusNotFound, "404 page not found") })
	g.NoMethod(func(c *gin.Context) { abort(c, http.StatusMethodNotAllowed, "405 method not allowed") })

	root := func(c *gin.Context) { c.String(http.StatusOK, "Ollama is running") }
	g.GET("/", root)
	g.HEAD("/", root)
	g.GET("/api/version", s.handleVersion)
	g.HEAD("/api/version", s.handleVersion)
	g.GET("/api/tags", s.handleTags)
	g.HEAD("/api/tags", s.handleTags)
	g.POST("/api/show", s.handleShow)
	g.POST("/api/pull", s.handlePull)
	g.DELETE("/api/delete", s.handleDelete)
	g.POST("/api/copy", s.handleCopy)
	g.POST("/api/create", s.handleCreate)          // modelfile.go
	g.HEAD("/api/blobs/:digest", s.handleBlobHead) // modelfile.go
	g.POST("/api/blobs/:digest", s.handleBlobPost)
	g.GET("/api/ps", s.handlePs)
	g.POST("/api/generate", s.handleGenerate)
	g.POST("/api/chat", s.handleChat)
	g.POST("/api/embed", s.handleEmbed)
	g.POST("/api/embeddings", s.handleEmbeddings)

	g.POST("/v1/chat/completions", s.handleOpenAIChat)
	g.POST("/v1/completions", s.handleOpenAICompletion)
	g.GET("/v1/models", s.handleOpenAIModels)
	g.GET("/v1/models/*model", s.handleOpenAIModel)
	g.POST("/v1/embeddings", s.handleOpenAIEmbeddings)
	g.POST("/v1/messages", s.handleAnthropicMessages) // server_anthropic.go
	g.POST("/v1/responses", s.handleResponses)        // server_responses.go

	g.GET("/metrics", gin.WrapH(promhttp.Handler()))
	g.DELETE("/api/prefix-cache", s.handlePrefixClear) // metrics_prefix.go
	g.GET("/api/status", s.handleStatus)               // status.go
	g.GET("/api/status/events", s.handleStatusEvents)
	if !cfg.NoDashboard {
		s.routeDashboard(g) // dashboard.go
	}
	s.gin = g
	return s, nil
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.gin }

// Serve serves on l until ctx ends, then shuts down gracefully: no new connections, requests in flight get
// grace to finish, then their generation is cancelled; then every model is unloaded.
func (s *Server) Serve(ctx context.Context, l net.Listener, grace time.Duration) error {
	s.hosts.listen(l.Addr())
	srv := &http.Server{Handler: s.gin, ReadHeaderTimeout: 30 * time.Second,
		BaseContext: func(net.Listener) context.Context { return s.stop }}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		s.Close()
		return err
	case <-ctx.Done():
	}
	s.log.Info("shutting down: finishing requests in flight", "grace", grace)
	shutCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	go func() {
		<-shutCtx.Done()
		s.cancel() // past the grace period: cancel generation still running
	}()
	err := srv.Shutdown(shutCtx)
	if errors.Is(err, context.DeadlineExceeded) {
		s.cancel()
		ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel2()
		err = srv.Shutdown(ctx2)
	}
	s.Close()
	<-errc // http.ErrServerClosed
	s.log.Info("server stopped")
	return err
}

// Close cancels what still runs, waits for it and unloads every model.
func (s *Server) Close() {
	s.cancel()
	s.inflight.Wait()
	s.sched.Close()
}

// apiError is an error with the HTTP status it answers with.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &apiError{status: status, msg: fmt.Sprintf(format, args...)}
}

// defaultRetryAfter is the Retry-After of a transient refusal that names no delay of its own.
const defaultRetryAfter = 10 * time.Second

// retryAfter is the hook through which the HTTP layer learns of transient refusals: a request refused only
// for now (the memory policy refusing a load under memory pressure, or a new model whose plan does not fit
// while the loaded ones serve, which the scheduler reports as a typed transient error) is answered 503
// with a Retry-After header, in every API's error shape, never 500. It reports whether err is one, and
// the header's value in whole seconds. An error is one when it, or an error it wraps, has a Transient
// method reporting true (the scheduler's transient errors wrap such a cause) or a RetryAfter method
// (its delay, else defaultRetryAfter), or is the scheduler's full queue.
func retryAfter(err error) (string, bool) {
	var transient interface{ Transient() bool }
	var delay interface{ RetryAfter() time.Duration }
	d := defaultRetryAfter
	switch {
	case errors.As(err, &delay):
		d = delay.RetryAfter()
	case errors.As(err, &transient) && transient.Transient():
	case errors.Is(err, sched.ErrQueueFull):
	default:
		return "", false
	}
	return strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10), true
}

// statusOf maps an error to its HTTP status and message.
func statusOf(err error) (int, string) {
	var ae *apiError
	var tooLarge *sched.TooLargeError
	var mbe *http.MaxBytesError
	var ce *runner.ContextError
	if _, ok := retryAfter(err); ok && !errors.As(err, &ae) {
		return http.StatusServiceUnavailable, err.Error()
	}
	switch {
	case errors.As(err, &ae):
		return ae.status, ae.msg
	case errors.As(err, &ce):
		return http.StatusBadRequest, ce.Error()
	case errors.Is(err, runner.ErrTextOnly), errors.Is(err, runner.ErrImagePlacement), errors.Is(err, vision.ErrImage):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, sched.ErrQueueFull):
		return http.StatusServiceUnavailable, err.Error()
	case errors.Is(err, sched.ErrClosed):
		return http.StatusServiceUnavailable, err.Error()
	case errors.As(err, &tooLarge):
		return http.StatusInsufficientStorage, err.Error()
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("request body too large: the limit is %d bytes", mbe.Limit)
	case errors.Is(err, context.Canceled):
		return 499, "request cancelled"
	case errors.Is(err, registry.ErrUnsupported):
		// A model whose architecture mlxg does not run: no retry helps, the request must name another.
		return http.StatusBadRequest, err.Error()
	}
	return http.StatusInternalServerError, err.Error()
}

// abort answers with Ollama's error shape {"error": "..."}, or on /v1/ paths (unknown routes, CORS,
// panics) with the shape of the API the path belongs to: Anthropic's on /v1/messages, OpenAI's elsewhere.
func abort(c *gin.Context, status int, msg string) {
	noteError(c, status, msg)
	switch p := c.Request.URL.Path; {
	case p == "/v1/messages" || strings.HasPrefix(p, "/v1/messages/"):
		c.AbortWithStatusJSON(status, anthropic.NewError(status, msg))
	case strings.HasPrefix(p, "/v1/"):
		c.AbortWithStatusJSON(status, openai.NewError(status, msg))
	default:
		c.AbortWithStatusJSON(status, gin.H{"error": msg})
	}
}

// contextExceeded answers a prompt that does not fit the context, with truncation off, in the called
// API's own terms: OpenAI's context_length_exceeded (what its SDKs and Codex look for), Anthropic's
// "prompt is too long: N tokens > M maximum" (what Claude Code reacts to by compacting), Ollama's
// error text. The most a prompt may hold is the context less one token for the reply.
func contextExceeded(c *gin.Context, ce *runner.ContextError) {
	c.Header(headerNumCtx, strconv.Itoa(ce.NumCtx))
	c.Header(headerPromptTokens, strconv.Itoa(ce.PromptTokens))
	limit := max(ce.NumCtx-1, 0)
	status := http.StatusBadRequest
	switch p := c.Request.URL.Path; {
	case p == "/v1/messages":
		msg := fmt.Sprintf("prompt is too long: %d tokens > %d maximum", ce.PromptTokens, limit)
		noteError(c, status, msg)
		c.AbortWithStatusJSON(status, anthropic.NewError(status, msg))
	case strings.HasPrefix(p, "/v1/"):
		msg := fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens, and at least one token of the context is kept for the reply. Please reduce the length of the input (mlxg: raise the context with MLXG_CONTEXT_LENGTH or a Modelfile's PARAMETER num_ctx, up to the model's maximum).",
			ce.NumCtx, ce.PromptTokens)
		param := "messages"
		switch p {
		case "/v1/completions":
			param = "prompt"
		case "/v1/responses":
			param = "input"
		}
		code := "context_length_exceeded"
		e := openai.NewError(status, msg)
		e.Error.Code, e.Error.Param = &code, param
		noteError(c, status, msg)
		c.AbortWithStatusJSON(status, e)
	default:
		abort(c, status, ce.Error())
	}
}

// abortV1 answers err on a /v1/ route in the error shape of the API the path belongs to (abort's choice:
// Anthropic's or OpenAI's), and not at all when the client is gone.
func abortV1(c *gin.Context, err error) {
	if status, _ := statusOf(err); status == 499 {
		c.Abort()
		return
	}
	abortErr(c, err)
}

// abortErr answers err with its status (statusOf) in the error shape of the API the path belongs to; a
// transient refusal also says when to retry (Retry-After).
func abortErr(c *gin.Context, err error) {
	var ce *runner.ContextError
	if errors.As(err, &ce) {
		contextExceeded(c, ce)
		return
	}
	status, msg := statusOf(err)
	if after, ok := retryAfter(err); ok {
		c.Header("Retry-After", after)
	}
	abort(c, status, msg)
}

// decode reads a JSON body into v with Ollama's errors: an empty body is "missing request body", bad JSON
// names the problem, an oversized body is 413.
func decode(c *gin.Context, v any) error {
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return errorf(http.StatusBadRequest, "reading the request body: %v", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return errorf(http.StatusBadRequest, "missing request body")
	}
	if err := json.Unmarshal(body, v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return errorf(http.StatusBadRequest, "invalid JSON in the request body at byte %d: %v", se.Offset, err)
		case errors.As(err, &te):
			return errorf(http.StatusBadRequest, "field %q must be of type %s, not a JSON %s", te.Field, te.Type, te.Value)
		}
		return errorf(http.StatusBadRequest, "%v", err)
	}
	return nil
}

// errorKey holds, in a request's gin context, the requestError it was answered with.
const errorKey = "mlxg.error"

// requestError is the error a request was answered with: its status, or the status of an error sent in a
// stream already begun (whose HTTP status is 200), and its message.
type requestError struct {
	status int
	msg    string
}

// noteError keeps the error a request is answered with for the access log.
func noteError(c *gin.Context, status int, msg string) {
	c.Set(errorKey, requestError{status: status, msg: msg})
}

// accessLog logs each request once it is answered (health checks and metrics at debug level). A request
// answered with an error, as its status or inside its stream, is logged with the error's message and the
// route that answered, at warning level (4xx) or error level (5xx), as Ollama's log names each failure.
func (s *Server) accessLog(c *gin.Context) {
	start := time.Now()
	c.Next()
	level := slog.LevelInfo
	path := c.Request.URL.Path
	if path == "/" || path == "/metrics" || path == "/api/version" {
		level = slog.LevelDebug
	}
	status := c.Writer.Status()
	attrs := []any{"method", c.Request.Method, "path", path, "status", status,
		"took", time.Since(start).Round(time.Microsecond), "client", c.ClientIP()}
	if v, ok := c.Get(errorKey); ok {
		e := v.(requestError)
		if route := c.FullPath(); route != "" && route != path {
			attrs = append(attrs, "route", route)
		}
		if e.status != status {
			attrs = append(attrs, "error_status", e.status)
		}
		attrs = append(attrs, "error", e.msg)
		level = slog.LevelWarn
		if e.status >= 500 {
			level = slog.LevelError
		}
	}
	s.log.Log(c.Request.Context(), level, "request", attrs...)
}

func (s *Server) recoverer(c *gin.Context) {
	defer func() {
		if r := recover(); r != nil {
			if r == http.ErrAbortHandler {
				panic(r)
			}
			s.log.Error("panic in handler", "path", c.Request.URL.Path, "panic", r)
			if !c.Writer.Written() {
				abort(c, http.StatusInternalServerError, fmt.Sprintf("internal error: %v", r))
			}
		}
	}()
	c.Next()
}

// limitBody bounds a request body at MaxBodyBytes: reading past it fails with an *http.MaxBytesError,
// which the handlers answer with a JSON 413 in their API's shape (decode). The rest of such a body is then
// read and dropped (up to drainLimit) before the reply goes out, so that a client that sends its whole body
// before reading (Python's urllib and requests do) reads the 413 instead of a broken pipe or a reset.
func (s *Server) limitBody(c *gin.Context) {
	if isBlobUpload(c) { // a model file, bounded by the disk (modelfile.go)
		c.Next()
		return
	}
	if c.Request.Body == nil || c.Request.Body == http.NoBody {
		c.Next()
		return
	}
	body := &limitedBody{ReadCloser: c.Request.Body, left: s.cfg.MaxBodyBytes, limit: s.cfg.MaxBodyBytes}
	c.Request.Body = body
	c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), responseHeaderKey{}, c.Writer.Header()))
	c.Next()
	if body.over {
		n, _ := io.Copy(io.Discard, io.LimitReader(body.ReadCloser, drainLimit(s.cfg.MaxBodyBytes)+1))
		if n > drainLimit(s.cfg.MaxBodyBytes) {
			c.Header("Connection", "close") // too much to read through: close instead
		}
	}
}

// drainLimit is how much of an oversized body is read through to deliver the 413.
func drainLimit(limit int64) int64 { return max(8*limit, 256<<20) }

// limitedBody reads at most limit bytes of a body; past that, Read fails with *http.MaxBytesError.
type limitedBody struct {
	io.ReadCloser
	left, limit int64
	over        bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.over {
		return 0, &http.MaxBytesError{Limit: b.limit}
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	if int64(n) > b.left {
		b.over = true
		return int(b.left), &http.MaxBytesError{Limit: b.limit}
	}
	b.left -= int64(n)
	return n, err
}

// cors allows browser requests from loopback origins and the configured ones, as Ollama does; other origins
// get 403. Requests without an Origin header (CLIs, SDKs) pass.
func (s *Server) cors(c *gin.Context) {
	origin := c.GetHeader("Origin")
	if origin == "" {
		c.Next()
		return
	}
	if !s.originAllowed(origin) {
		abort(c, http.StatusForbidden, fmt.Sprintf("origin %q is not allowed; add it to MLXG_ORIGINS (or OLLAMA_ORIGINS)", origin))
		return
	}
	h := c.Writer.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS")
	h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, User-Agent, Accept, X-Requested-With, "+
		"X-Stainless-Lang, X-Stainless-Package-Version, X-Stainless-Os, X-Stainless-Arch, X-Stainless-Retry-Count, "+
		"X-Stainless-Runtime, X-Stainless-Runtime-Version, X-Stainless-Async, X-Stainless-Helper-Method, "+
		"X-Stainless-Poll-Helper, X-Stainless-Custom-Poll-Interval, X-Stainless-Timeout, "+
		"X-Api-Key, Anthropic-Version, Anthropic-Beta, Anthropic-Dangerous-Direct-Browser-Access")
	h.Set("Access-Control-Max-Age", "43200")
	// A page may read how its prompt fit the context (server_generate.go's headers).
	h.Set("Access-Control-Expose-Headers", strings.Join([]string{headerNumCtx, headerPromptTokens, headerPromptTruncated, headerMessagesDropped}, ", "))
	if c.Request.Method == http.MethodOptions {
		c.AbortWithStatus(http.StatusNoContent)
		return
	}
	c.Next()
}

func (s *Server) originAllowed(origin string) bool {
	for _, pat := range s.cfg.Origins {
		if pat == "*" || pat == origin {
			return true
		}
		if ok, _ := path.Match(pat, origin); ok {
			return true
		}
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "http", "https":
		switch u.Hostname() {
		case "localhost", "127.0.0.1", "::1", "0.0.0.0":
			return true
		}
	case "app", "file", "tauri", "vscode-webview":
		return true
	}
	return false
}

// OriginsFromEnv reads MLXG_ORIGINS, else OLLAMA_ORIGINS: a comma-separated list.
func OriginsFromEnv(getenv func(string) string) []string {
	v := getenv("MLXG_ORIGINS")
	if v == "" {
		v = getenv("OLLAMA_ORIGINS")
	}
	var out []string
	for _, o := range strings.Split(v, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}
