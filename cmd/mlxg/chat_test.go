package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/term"

	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/api/server"
	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/hubtest"
)

// Tests start an in-process server instead of `mlxg serve` (the test binary is no mlxg).
func init() { startServer = inProcessServer }

func inProcessServer(ctx context.Context, base *url.URL, errw io.Writer) (*url.URL, error) {
	store, err := registry.DefaultStore()
	if err != nil {
		return nil, err
	}
	srv, err := server.NewServer(server.ServerConfig{Store: store, Loader: &server.EngineLoader{Threads: 2}, Version: version,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	ts := httptest.NewServer(srv.Handler())
	fmt.Fprintf(errw, "started an in-process server at %s\n", ts.URL)
	return url.Parse(ts.URL)
}

// scriptedStore makes a store holding the scripted model as "scripted", and a fake hub serving it as
// mlxg-test/scripted; no server answers at MLXG_HOST.
func scriptedStore(t *testing.T) {
	t.Helper()
	tok := testdata.Tokenizer(t, "qwen3")
	tmp := t.TempDir()
	t.Setenv("HF_HUB_CACHE", filepath.Join(tmp, "hub"))
	t.Setenv("MLXG_HOME", filepath.Join(tmp, "home"))
	t.Setenv("MLXG_HOST", "127.0.0.1:1")
	t.Setenv("OLLAMA_HOST", "")
	repo := filepath.Join(tmp, "repos", "mlxg-test", "scripted")
	if err := apitest.WriteScripted(repo, tok, apitest.Qwen3); err != nil {
		t.Fatal(err)
	}
	hub := httptest.NewServer(hubtest.New(filepath.Join(tmp, "repos")))
	t.Cleanup(hub.Close)
	t.Setenv("HF_ENDPOINT", hub.URL)
	store, _ := registry.DefaultStore()
	n, _ := registry.ParseName("scripted")
	if _, err := store.ImportDir(context.Background(), n, repo); err != nil {
		t.Fatal(err)
	}
}

func runClient(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := newRunCmd()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetIn(strings.NewReader(stdin))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

func TestRunOneShot(t *testing.T) {
	scriptedStore(t)
	out, errs, err := runClient(t, "", "scripted", "Weather?", "--think=false", "--verbose")
	if err != nil || out != apitest.PlainReply+"\n" {
		t.Fatalf("%v: %q\n%s", err, out, errs)
	}
	if !strings.Contains(errs, "started an in-process server") || !strings.Contains(errs, "eval rate:") {
		t.Fatalf("stderr: %s", errs)
	}
	toolText := strings.TrimPrefix(apitest.ToolReply, "<think>"+apitest.ToolThinking+"</think>")
	out, errs, err = runClient(t, "", "scripted", "Weather?")
	if want := "Thinking...\n" + apitest.ToolThinking + "\n...done thinking.\n\n" + toolText + "\n"; err != nil || out != want {
		t.Fatalf("%v: %q, want %q\n%s", err, out, want, errs)
	}
	out, _, err = runClient(t, "", "scripted", "Weather?", "--think", "--hidethinking")
	if err != nil || out != toolText+"\n" {
		t.Fatalf("--hidethinking: %v %q", err, out)
	}
	// The prompt from stdin; options by Ollama's names.
	out, _, err = runClient(t, "Weather?", "scripted", "--think=false", "-o", "num_predict=2")
	if err != nil || out != "The weather\n" {
		t.Fatalf("stdin prompt: %v %q", err, out)
	}
	// --raw skips the template: an unscripted prompt makes greedy decoding repeat token 0 ("!").
	out, _, err = runClient(t, "", "scripted", "--raw", "zzzz", "-o", "num_predict=3", "-o", "temperature=0")
	if err != nil || out != "!!!\n" {
		t.Fatalf("--raw: %v %q", err, out)
	}
	if _, _, err = runClient(t, "", "scripted", "hi", "-o", "top_k=many"); err == nil || !strings.Contains(err.Error(), "top_k") {
		t.Fatalf("bad option: %v", err)
	}
	if _, _, err = runClient(t, "", "scripted", "hi", "--think=maybe"); err == nil {
		t.Fatal("--think=maybe accepted")
	}
}

func TestRunPullsMissingModel(t *testing.T) {
	scriptedStore(t)
	out, errs, err := runClient(t, "", "mlxg-test/scripted", "Weather?", "--think=false")
	if err != nil || out != apitest.PlainReply+"\n" || !strings.Contains(errs, "success") {
		t.Fatalf("%v: %q\n%s", err, out, errs)
	}
	if _, _, err := runClient(t, "", "mlxg-test/absent", "hi"); err == nil || !strings.Contains(err.Error(), "404") && !strings.Contains(err.Error(), "not found") {
		t.Fatalf("absent model: %v", err)
	}
}

func TestREPL(t *testing.T) {
	scriptedStore(t)
	var errb bytes.Buffer
	c, err := connect(context.Background(), &errb)
	if err != nil {
		t.Fatal(err)
	}
	show, err := ensureModel(context.Background(), c, "scripted", &errb)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	s := &chatSession{c: c, model: "scripted", show: show, options: map[string]any{}, out: &out, errw: &errb}
	if err := s.load(context.Background()); err != nil {
		t.Fatal(err)
	}
	input := strings.Join([]string{
		"/set nothink",
		`"""`, "What is", "the weather?", `"""`,
		"/set parameter num_predict 2",
		"/set parameter top_k many",
		"Weather?",
		"/set system Be brief.",
		"/show info",
		"/show template",
		"/show system",
		"/show license",
		"/clear",
		"/set verbose",
		`"""Weather?"""`,
		"/nonsense",
		"/bye",
		"never read",
	}, "\n")
	if err := s.repl(context.Background(), &plainLines{sc: bufio.NewScanner(strings.NewReader(input)), out: &out}); err != nil {
		t.Fatal(err)
	}
	o, e := out.String(), errb.String()
	for _, want := range []string{"Set 'nothink' mode.", apitest.PlainReply + "\n", "Set parameter 'num_predict' to '2'",
		"The weather\n", "Set system message.", "architecture        llama", "Cleared session context", "... ",
		"<|im_start|>", "Be brief.\n", "No license was specified"} {
		if !strings.Contains(o, want) {
			t.Errorf("output lacks %q:\n%s", want, o)
		}
	}
	for _, want := range []string{`parameter "top_k"`, "eval rate:", `unknown command "/nonsense"`} {
		if !strings.Contains(e, want) {
			t.Errorf("stderr lacks %q:\n%s", want, e)
		}
	}
	if s.system != "Be brief." || len(s.messages) != 2 || s.messages[0].Content != "Weather?" {
		t.Fatalf("session state: system %q, messages %+v", s.system, s.messages)
	}
	if strings.Contains(o, "never read") {
		t.Fatal("read past /bye")
	}
}

// TestTermLines drives the terminal line editor with keystrokes: Ctrl-C drops the line and keeps going,
// the up arrow recalls history (also from the history file), Ctrl-D ends.
func TestTermLines(t *testing.T) {
	hist := filepath.Join(t.TempDir(), "history")
	if err := os.WriteFile(hist, []byte("older line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := &fileHistory{}
	h.load(hist)
	var out bytes.Buffer
	cr := &ctrlCReader{r: strings.NewReader("half a li\x03first\r\x1b[A\r\x1b[A\x1b[A\r\x04")}
	tl := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{cr, &out}, "")
	tl.History = h
	l := &termLines{t: tl, in: cr, out: &out, hist: h}
	var got []string
	for {
		line, err := l.ReadLine(">>> ")
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, line)
	}
	if want := []string{"first", "first", "older line"}; !slices.Equal(got, want) {
		t.Fatalf("lines %q, want %q", got, want)
	}
	if !strings.Contains(out.String(), "Use Ctrl + d or /bye to exit.") {
		t.Fatalf("no Ctrl-C hint in %q", out.String())
	}
	b, _ := os.ReadFile(hist)
	if string(b) != "older line\nfirst\nolder line\n" {
		t.Fatalf("history file %q", b)
	}
}
