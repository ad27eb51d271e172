package runner

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/text/template"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// logBuffer collects log lines for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

var (
	chatOnce sync.Once
	chatDir  string
	chatErr  error
)

// chatModel is a small random Qwen3 with the real Qwen3 tokenizer and chat template,
// generated once per test binary.
func chatModel(t *testing.T) string {
	t.Helper()
	tok := testdata.Tokenizer(t, "qwen3")
	chatOnce.Do(func() {
		cfg := randmodel.Tiny("qwen3", 151936)
		cfg.HiddenSize, cfg.IntermediateSize, cfg.HeadDim = 64, 128, 16
		cfg.DType = "bfloat16"
		cfg.EOSTokenIDs = []int{151645, 151643}
		chatDir, chatErr = osMkdirTemp()
		if chatErr == nil {
			chatErr = randmodel.Generate(chatDir, cfg, randmodel.Options{Seed: 42, TokenizerDir: tok})
		}
	})
	if chatErr != nil {
		t.Fatal(chatErr)
	}
	return chatDir
}

var (
	engineOnce sync.Once
	shared     *Engine
	sharedErr  error
)

// loadChat returns the engine of chatModel, loaded once; log, when set, receives its
// log lines until the test ends.
func loadChat(t *testing.T, log *slog.Logger) *Engine {
	t.Helper()
	dir := chatModel(t)
	engineOnce.Do(func() { shared, sharedErr = Load(dir, LoadOptions{Logger: quietLog()}) })
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	if log != nil {
		shared.log = log
		t.Cleanup(func() { shared.log = quietLog() })
	}
	return shared
}

var hello = []template.Message{
	{"role": "system", "content": "You are terse."},
	{"role": "user", "content": "Say something about the sea."},
}

func TestGenerateChat(t *testing.T) {
	e := loadChat(t, nil)
	o := Greedy()
	o.NumPredict = 12
	var streamed strings.Builder
	res, err := e.Generate(context.Background(), Request{Messages: hello, Options: o}, func(s string) error {
		if !utf8.ValidString(s) {
			t.Errorf("streamed invalid UTF-8 %q", s)
		}
		streamed.WriteString(s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.EvalCount != 12 || res.DoneReason != "length" || len(res.Tokens) != 12 {
		t.Fatalf("result %+v", res)
	}
	if streamed.String() != res.Text || res.Text != e.Tokenizer.Decode(res.Tokens, true) {
		t.Fatalf("streamed %q, result %q, decoded %q", streamed.String(), res.Text, e.Tokenizer.Decode(res.Tokens, true))
	}
	rendered, err := e.Template.Apply(hello, template.Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(e.Tokenizer.Encode(rendered, false)); res.PromptTokens != want {
		t.Fatalf("prompt tokens %d, the rendered chat has %d", res.PromptTokens, want)
	}
	if !strings.Contains(rendered, "<|im_start|>assistant") {
		t.Fatalf("rendered chat lacks the generation prompt: %q", rendered)
	}
	if res.PromptDuration <= 0 || res.EvalDuration <= 0 || res.PromptRate() <= 0 || res.EvalRate() <= 0 {
		t.Fatalf("durations %+v", res)
	}

	// The same request again gives the same tokens (greedy), and chunked prefill
	// (num_batch 3) changes nothing.
	o.NumBatch = 3
	again, err := e.Generate(context.Background(), Request{Messages: hello, Options: o}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.Tokens, res.Tokens) {
		t.Fatalf("num_batch 3 gave %v, num_batch 512 gave %v", again.Tokens, res.Tokens)
	}
	// A load's MaxBatch (a streamed model's) caps num_batch: the same tokens.
	e.maxBatch, o.NumBatch = 2, 512
	capped, err := e.Generate(context.Background(), Request{Messages: hello, Options: o}, nil)
	e.maxBatch = 0
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(capped.Tokens, res.Tokens) {
		t.Fatalf("max_batch 2 gave %v, num_batch 512 gave %v", capped.Tokens, res.Tokens)
	}
}

func TestStopStrings(t *testing.T) {
	e := loadChat(t, nil)
	o := Greedy()
	o.NumPredict = 24
	full, err := e.Generate(context.Background(), Request{Messages: hello, Options: o}, nil)
	if err != nil {
		t.Fatal(err)
	}
	runes := []rune(full.Text)
	if len(runes) < 12 {
		t.Fatalf("greedy text too short to cut: %q", full.Text)
	}
	// A stop string from the middle of the text: generation must end right before its
	// first occurrence, whatever tokens it spans.
	stop := string(runes[len(runes)/2 : len(runes)/2+3])
	want := full.Text[:strings.Index(full.Text, stop)]
	o.Stop = []string{"never-appears", stop}
	var streamed strings.Builder
	res, err := e.Generate(context.Background(), Request{Messages: hello, Options: o}, func(s string) error {
		streamed.WriteString(s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != want || streamed.String() != want || res.DoneReason != "stop" {
		t.Fatalf("stop %q: got %q (%s), want %q", stop, res.Text, res.DoneReason, want)
	}
	if len(res.Tokens) >= len(full.Tokens) {
		t.Fatalf("generation did not end at the stop string: %d tokens", len(res.Tokens))
	}
}

func TestEOSEndsGeneration(t *testing.T) {
	e := loadChat(t, nil)
	if !slices.Contains(e.EOS(), 151645) || !slices.Contains(e.EOS(), 151643) {
		t.Fatalf("EOS %v lacks the Qwen ids from generation_config.json and the tokenizer", e.EOS())
	}
	o := Greedy()
	o.NumPredict = 16
	full, err := e.Generate(context.Background(), Request{Messages: hello, Options: o}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Declare the first token that does not occur earlier an end-of-sequence token.
	k := 1
	for k < len(full.Tokens) && slices.Contains(full.Tokens[:k], full.Tokens[k]) {
		k++
	}
	if k == len(full.Tokens) {
		t.Skip("the greedy output repeats one token")
	}
	saved := e.eos
	e.eos = append(e.EOS(), full.Tokens[k])
	defer func() { e.eos = saved }()
	res, err := e.Generate(context.Background(), Request{Messages: hello, Options: o}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.DoneReason != "stop" || !slices.Equal(res.Tokens, full.Tokens[:k]) {
		t.Fatalf("with EOS %d: %v (%s), want %v", full.Tokens[k], res.Tokens, res.DoneReason, full.Tokens[:k])
	}
}

func TestSeed(t *testing.T) {
	e := loadChat(t, nil)
	run := func(seed int) []int32 {
		o := DefaultOptions()
		o.Seed, o.NumPredict, o.Temperature, o.TopK = seed, 16, 1.5, 100
		res, err := e.Generate(context.Background(), Request{Messages: hello, Options: o}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Tokens
	}
	a, b, c := run(7), run(7), run(8)
	if !slices.Equal(a, b) {
		t.Fatalf("seed 7 gave %v then %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatalf("seeds 7 and 8 gave the same 16 tokens %v", a)
	}
}

func TestCancel(t *testing.T) {
	e := loadChat(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := Greedy()
	o.NumPredict = 50
	n := 0
	res, err := e.Generate(ctx, Request{Messages: hello, Options: o}, func(string) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if res == nil || len(res.Tokens) > 4 {
		t.Fatalf("generation went on after cancellation: %+v", res)
	}
	// A callback error stops generation too, and is returned.
	boom := errors.New("client went away")
	calls := 0
	_, err = e.Generate(context.Background(), Request{Messages: hello, Options: o}, func(string) error { calls++; return boom })
	if !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("callback error %v not returned, or the callback was called %d times", err, calls)
	}
}

func TestContextOverflow(t *testing.T) {
	var logs logBuffer
	e := loadChat(t, slog.New(slog.NewTextHandler(&logs, nil)))
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 30)
	n := len(e.Tokenizer.Encode(prompt, true))
	o := Greedy()
	o.NumCtx, o.NumPredict = 64, -2
	res, err := e.Generate(context.Background(), Request{Prompt: prompt, Options: o}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Ollama's cut: keep num_keep (4), then the newest (64-4)/2 tokens.
	if res.PromptTokens != 4+30 || res.PromptTruncated != n-34 {
		t.Fatalf("prompt of %d tokens into num_ctx 64: kept %d, dropped %d", n, res.PromptTokens, res.PromptTruncated)
	}
	if !strings.Contains(logs.String(), "truncating input prompt") {
		t.Fatalf("no truncation in the log: %s", logs.String())
	}
	// num_predict -2 stops when the window is full (unless EOS came first).
	if res.DoneReason == "length" && res.EvalCount != 64-34+1 {
		t.Fatalf("filled the window with %d tokens after a %d-token prompt", res.EvalCount, res.PromptTokens)
	}
}

// With num_predict beyond the window, the context shifts as Ollama's does: the next
// token is what a fresh pass over the kept tokens predicts.
func TestContextShift(t *testing.T) {
	var logs logBuffer
	e := loadChat(t, slog.New(slog.NewTextHandler(&logs, nil)))
	e.eos, e.log = nil, slog.New(slog.NewTextHandler(&logs, nil))
	defer func() { e.eos = mergeIDs(e.Model.Config.EOS, e.Tokenizer.EOS()) }()
	prompt := e.Tokenizer.Encode("Once upon a time there was a lighthouse keeper who", true)
	p := len(prompt)
	o := Greedy()
	o.NumCtx, o.NumPredict, o.NumKeep = 32, 40, 4
	res, err := e.GenerateTokens(context.Background(), prompt, o, func(int32) (bool, error) { return false, nil })
	if err != nil {
		t.Fatal(err)
	}
	if res.EvalCount != 40 || !strings.Contains(logs.String(), "context limit hit - shifting") {
		t.Fatalf("%d tokens; log: %s", res.EvalCount, logs.String())
	}
	// The first shift comes before feeding token j (1-based) with p+j-1 == num_ctx.
	j := o.NumCtx - p + 1
	held := append(slices.Clone(prompt), res.Tokens[:j-1]...)
	discard := (o.NumCtx - o.NumKeep) / 2
	kept := append(slices.Clone(held[:o.NumKeep]), held[o.NumKeep+discard:]...)
	caches, err := e.Model.NewCaches(false)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := e.Model.Forward(context.Background(), append(kept, res.Tokens[j-1]), caches, false)
	if err != nil {
		t.Fatal(err)
	}
	best := 0
	for i, l := range logits {
		if l > logits[best] {
			best = i
		}
	}
	if int32(best) != res.Tokens[j] {
		t.Fatalf("after the shift the engine chose %d, a fresh pass over the kept tokens %d", res.Tokens[j], best)
	}
}

func TestChatTruncationKeepsSystem(t *testing.T) {
	var logs logBuffer
	e := loadChat(t, slog.New(slog.NewTextHandler(&logs, nil)))
	msgs := []template.Message{{"role": "system", "content": "SYSTEM-RULES stay."}}
	for i := range 12 {
		msgs = append(msgs,
			template.Message{"role": "user", "content": strings.Repeat("question number "+string(rune('a'+i))+" ", 8)},
			template.Message{"role": "assistant", "content": "answer " + string(rune('a'+i))})
	}
	msgs = append(msgs, template.Message{"role": "user", "content": "LAST-QUESTION here"})
	ids, dropped, err := e.chatPrompt(Request{Messages: msgs}, 200, true)
	if err != nil {
		t.Fatal(err)
	}
	text := e.Tokenizer.Decode(ids, false)
	if dropped == 0 || len(ids) > 200 {
		t.Fatalf("dropped %d messages, %d tokens", dropped, len(ids))
	}
	if !strings.Contains(text, "SYSTEM-RULES") || !strings.Contains(text, "LAST-QUESTION") || strings.Contains(text, "question number a") {
		t.Fatalf("truncated chat: %q", text)
	}
	if !strings.Contains(logs.String(), "truncating input messages") {
		t.Fatalf("no truncation in the log")
	}
	// Dropping one message less would not fit.
	if all, _, _ := e.chatPrompt(Request{Messages: msgs}, 100000, true); len(all) <= 200 {
		t.Fatalf("the whole chat (%d tokens) fits: the test proves nothing", len(all))
	}
}

func TestNoChatTemplate(t *testing.T) {
	e := loadChat(t, nil)
	saved := e.Template
	e.Template = nil
	defer func() { e.Template = saved }()
	if _, err := e.Generate(context.Background(), Request{Messages: hello, Options: Greedy()}, nil); err == nil || !strings.Contains(err.Error(), "chat template") {
		t.Fatalf("chat without a template: %v", err)
	}
}

func osMkdirTemp() (string, error) { return os.MkdirTemp("", "mlxg-runner-test-*") }

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Close()
	}
	if chatDir != "" {
		os.RemoveAll(chatDir)
	}
	os.Exit(code)
}

// Requests run concurrently on one engine, each with its own caches and sampler.
func TestConcurrentRequests(t *testing.T) {
	e := loadChat(t, nil)
	o := Greedy()
	o.NumPredict = 8
	want, err := e.Generate(context.Background(), Request{Messages: hello, Options: o}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]*Result, 3)
	for i := range results {
		wg.Go(func() {
			res, err := e.Generate(context.Background(), Request{Messages: hello, Options: o}, nil)
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = res
		})
	}
	wg.Wait()
	for _, r := range results {
		if r == nil || !slices.Equal(r.Tokens, want.Tokens) {
			t.Fatalf("a concurrent request gave %v, alone %v", r, want.Tokens)
		}
	}
}

func TestHasChatTemplate(t *testing.T) {
	for body, want := range map[string]bool{
		`{"chat_template": "{{ messages }}"}`:                       true,
		`{"chat_template": [{"name": "default", "template": "x"}]}`: true,
		`{"chat_template": null}`:                                   false,
		`{"eos_token": "</s>"}`:                                     false,
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(body), 0o644)
		if got := hasChatTemplate(dir); got != want {
			t.Errorf("%s: %v", body, got)
		}
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("x"), 0o644)
	if !hasChatTemplate(dir) {
		t.Error("chat_template.jinja not seen")
	}
}

// Ollama's "truncate": false and "shift": false.
func TestNoTruncateNoShift(t *testing.T) {
	e := loadChat(t, nil)
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 30)
	o := Greedy()
	o.NumCtx = 64
	_, err := e.Generate(context.Background(), Request{Prompt: long, Options: o, NoTruncate: true}, nil)
	var ce *ContextError
	if !errors.As(err, &ce) || ce.NumCtx != 64 || ce.PromptTokens <= 64 {
		t.Fatalf("an oversized prompt with NoTruncate: %v", err)
	}
	msgs := append(slices.Clone(hello), template.Message{"role": "user", "content": long})
	if _, err := e.Generate(context.Background(), Request{Messages: msgs, Options: o, NoTruncate: true}, nil); !errors.As(err, &ce) {
		t.Fatalf("an oversized chat with NoTruncate: %v", err)
	}

	saved := e.eos
	e.eos = nil // random weights: only the window may end it
	defer func() { e.eos = saved }()
	o.NumCtx, o.NumPredict = 32, 40
	res, err := e.Generate(context.Background(), Request{Prompt: "Once upon a time", Options: o, NoShift: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.DoneReason != "length" || res.EvalCount != 32-res.PromptTokens+1 {
		t.Fatalf("NoShift: %d tokens after a %d-token prompt (%s)", res.EvalCount, res.PromptTokens, res.DoneReason)
	}
}
