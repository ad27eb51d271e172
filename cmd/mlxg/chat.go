package main

// The chat client behind `mlxg run`: it talks to a server through api.Client like every other command,
// starting `mlxg serve` in the background when none answers, pulling the model when the store lacks it.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/registry"
)

// startServer starts a server when none answers at base and returns where it listens. It runs `mlxg serve`
// in the background; tests replace it with an in-process server.
var startServer = spawnServe

// spawnServe starts `mlxg serve` detached, logging to MLXG_HOME/logs/server.log, and waits for it.
func spawnServe(ctx context.Context, base *url.URL, errw io.Writer) (*url.URL, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	home, err := registry.HomeDir()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(home, "logs", "server.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(exe, "serve")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "MLXG_HOST="+base.Host)
	detach(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting mlxg serve: %w", err)
	}
	fmt.Fprintf(errw, "No server answered at %s: started `mlxg serve` in the background (pid %d, log %s)\n", base, cmd.Process.Pid, logPath)
	go func() { _ = cmd.Wait() }() // reap it if it exits early
	c := api.NewClient(base, nil)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := c.Heartbeat(ctx); err == nil {
			return base, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("mlxg serve did not answer at %s within 30s; see %s", base, logPath)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// connect returns a client of the running server, starting one when none answers.
func connect(ctx context.Context, errw io.Writer) (*api.Client, error) {
	c, err := api.ClientFromEnvironment()
	if err != nil {
		return nil, err
	}
	err = c.Heartbeat(ctx)
	if err == nil {
		return c, nil
	}
	if !api.Unreachable(err) {
		return nil, err
	}
	base, err := startServer(ctx, c.Base(), errw)
	if err != nil {
		return nil, err
	}
	return api.NewClient(base, nil), nil
}

// isNotFound reports a 404 answer.
func isNotFound(err error) bool {
	var se api.StatusError
	return errors.As(err, &se) && se.StatusCode == http.StatusNotFound
}

// ensureModel pulls the model when the store lacks it (as ollama run does) and returns what show says.
func ensureModel(ctx context.Context, c *api.Client, model string, errw io.Writer) (*api.ShowResponse, error) {
	show, err := c.Show(ctx, &api.ShowRequest{Model: model})
	if !isNotFound(err) {
		return show, err
	}
	r := newPullRenderer(errw, model)
	err = c.Pull(ctx, &api.PullRequest{Model: model}, r.event)
	r.close(err == nil)
	if err != nil {
		return nil, err
	}
	return c.Show(ctx, &api.ShowRequest{Model: model})
}

// spinner draws a spinner on a terminal until stopped.
type spinner struct {
	stop chan struct{}
	done sync.WaitGroup
}

func startSpinner(w io.Writer, msg string) *spinner {
	s := &spinner{stop: make(chan struct{})}
	if !isTerminal(w) {
		return s
	}
	s.done.Go(func() {
		frames := []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			fmt.Fprintf(w, "\r%s %s", frames[i%len(frames)], msg)
			select {
			case <-s.stop:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-t.C:
			}
		}
	})
	return s
}

func (s *spinner) Stop() {
	close(s.stop)
	s.done.Wait()
}

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// chatSession is one conversation with a model.
type chatSession struct {
	c            *api.Client
	model        string
	show         *api.ShowResponse
	messages     []api.Message
	system       string
	options      map[string]any
	think        *api.ThinkValue
	hideThinking bool
	verbose      bool
	keepAlive    *api.Duration
	format       json.RawMessage // structured output (--format)
	out, errw    io.Writer
}

// load asks the server to load the model, with a spinner.
func (s *chatSession) load(ctx context.Context) error {
	sp := startSpinner(s.errw, "loading "+s.model)
	defer sp.Stop()
	return s.c.Generate(ctx, &api.GenerateRequest{Model: s.model, KeepAlive: s.keepAlive}, func(api.GenerateResponse) error { return nil })
}

// send sends one user message and streams the reply: thinking (unless hidden) between "Thinking..." and
// "...done thinking.", then the answer, as ollama run shows them.
func (s *chatSession) send(ctx context.Context, text string) error {
	msgs := slices.Clone(s.messages)
	if s.system != "" && (len(msgs) == 0 || msgs[0].Role != "system") {
		msgs = append([]api.Message{{Role: "system", Content: s.system}}, msgs...)
	}
	user := api.Message{Role: "user", Content: text}
	if s.show != nil && slices.Contains(s.show.Capabilities, "vision") {
		var paths []string
		var err error
		if user.Content, user.Images, paths, err = attachImages(text); err != nil {
			return err
		}
		for _, p := range paths {
			fmt.Fprintf(s.errw, "Added image '%s'\n", p)
		}
	}
	msgs = append(msgs, user)
	req := &api.ChatRequest{Model: s.model, Messages: msgs, Options: s.options, Think: s.think, KeepAlive: s.keepAlive, Format: s.format}
	var reply api.Message
	var final api.ChatResponse
	thinking, started := false, false
	sp := startSpinner(s.errw, "")
	stopSpin := func() {
		if !started {
			started = true
			sp.Stop()
		}
	}
	defer stopSpin()
	err := s.c.Chat(ctx, req, func(r api.ChatResponse) error {
		stopSpin()
		if t := r.Message.Thinking; t != "" {
			reply.Thinking += t
			if !s.hideThinking {
				if !thinking {
					fmt.Fprint(s.out, "Thinking...\n")
					thinking = true
				}
				fmt.Fprint(s.out, t)
			}
		}
		if c := r.Message.Content; c != "" || len(r.Message.ToolCalls) > 0 {
			if thinking {
				fmt.Fprint(s.out, "\n...done thinking.\n\n")
				thinking = false
			}
			reply.Content += c
			fmt.Fprint(s.out, c)
			reply.ToolCalls = append(reply.ToolCalls, r.Message.ToolCalls...)
		}
		if r.Done {
			final = r
		}
		return nil
	})
	stopSpin()
	if thinking {
		fmt.Fprint(s.out, "\n...done thinking.\n\n")
	}
	if reply.Content != "" && !strings.HasSuffix(reply.Content, "\n") {
		fmt.Fprintln(s.out)
	}
	if err != nil {
		return err
	}
	reply.Role = "assistant"
	s.messages = append(s.messages, user, reply)
	if s.verbose {
		printMetrics(s.errw, final.Metrics)
	}
	return nil
}

// printMetrics prints a request's timings as ollama run --verbose does.
func printMetrics(w io.Writer, m api.Metrics) {
	rate := func(n int, d time.Duration) float64 {
		if d <= 0 {
			return 0
		}
		return float64(n) / d.Seconds()
	}
	fmt.Fprintf(w, "total duration:       %v\n", m.TotalDuration)
	fmt.Fprintf(w, "load duration:        %v\n", m.LoadDuration)
	fmt.Fprintf(w, "prompt eval count:    %d token(s)\n", m.PromptEvalCount)
	fmt.Fprintf(w, "prompt eval duration: %v\n", m.PromptEvalDuration)
	fmt.Fprintf(w, "prompt eval rate:     %.2f tokens/s\n", rate(m.PromptEvalCount, m.PromptEvalDuration))
	fmt.Fprintf(w, "eval count:           %d token(s)\n", m.EvalCount)
	fmt.Fprintf(w, "eval duration:        %v\n", m.EvalDuration)
	fmt.Fprintf(w, "eval rate:            %.2f tokens/s\n", rate(m.EvalCount, m.EvalDuration))
	printDrafts(w, m.DraftCount, m.DraftAcceptedCount)
}

// printDrafts prints speculative decoding's counts, when it drafted.
func printDrafts(w io.Writer, drafted, kept int) {
	if drafted > 0 {
		fmt.Fprintf(w, "draft tokens:         %d token(s), %d accepted (%.1f%%)\n", drafted, kept, 100*float64(kept)/float64(drafted))
	}
}

const replHelp = `Available Commands:
  /set parameter NAME VALUE  Set a generation option (Ollama's names: temperature, num_ctx, top_k, stop...)
  /set system TEXT           Set the system message
  /set think, /set nothink   Turn thinking on or off (thinking models)
  /set verbose, /set quiet   Show or hide timings after each answer
  /show info                 Show the model's details (also: license, parameters, system, template)
  /clear                     Clear the conversation
  /bye                       Exit
  /?, /help                  This help

Use """ to begin and end a multi-line message.
`

// lineReader reads the user's lines.
type lineReader interface {
	ReadLine(prompt string) (string, error)
}

// command runs a /command; quit reports /bye.
func (s *chatSession) command(ctx context.Context, line string) (quit bool, err error) {
	f := strings.Fields(line)
	switch f[0] {
	case "/bye", "/exit":
		return true, nil
	case "/?", "/help":
		fmt.Fprint(s.out, replHelp)
	case "/clear":
		s.messages = nil
		fmt.Fprintln(s.out, "Cleared session context")
	case "/show":
		if len(f) < 2 || s.show == nil {
			return false, fmt.Errorf("usage: /show info|license|parameters|system|template")
		}
		switch f[1] {
		case "info":
			s.printInfo()
		case "license":
			fmt.Fprintln(s.out, orNone(s.show.License, "No license was specified for this model."))
		case "parameters":
			fmt.Fprintln(s.out, orNone(s.show.Parameters, "No parameters were specified for this model."))
		case "system":
			fmt.Fprintln(s.out, orNone(s.system, "No system message was specified for this session."))
		case "template":
			fmt.Fprintln(s.out, orNone(s.show.Template, "No chat template was found for this model."))
		default:
			return false, fmt.Errorf("usage: /show info|license|parameters|system|template")
		}
	case "/set":
		if len(f) < 2 {
			return false, fmt.Errorf("usage: /set parameter NAME VALUE, /set system TEXT, /set think|nothink, /set verbose|quiet")
		}
		switch f[1] {
		case "parameter":
			if len(f) < 4 {
				return false, fmt.Errorf("usage: /set parameter NAME VALUE")
			}
			name, value := f[2], strings.Join(f[3:], " ")
			if err := setOption(s.options, name, value); err != nil {
				return false, err
			}
			fmt.Fprintf(s.out, "Set parameter '%s' to '%s'\n", name, value)
		case "system":
			s.system = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(line, "/set")), "system"))
			s.system = strings.Trim(s.system, `"`)
			fmt.Fprintln(s.out, "Set system message.")
		case "think":
			s.think = &api.ThinkValue{Value: true}
			fmt.Fprintln(s.out, "Set 'think' mode.")
		case "nothink":
			s.think = &api.ThinkValue{Value: false}
			fmt.Fprintln(s.out, "Set 'nothink' mode.")
		case "verbose":
			s.verbose = true
			fmt.Fprintln(s.out, "Set 'verbose' mode.")
		case "quiet":
			s.verbose = false
			fmt.Fprintln(s.out, "Set 'quiet' mode.")
		default:
			return false, fmt.Errorf("unknown /set %s (see /help)", f[1])
		}
	default:
		return false, fmt.Errorf("unknown command %q (see /help)", f[0])
	}
	return false, nil
}

func orNone(s, none string) string {
	if strings.TrimSpace(s) == "" {
		return none
	}
	return s
}

func (s *chatSession) printInfo() {
	if s.show == nil {
		return
	}
	d := s.show.Details
	fmt.Fprintf(s.out, "  Model\n    architecture        %s\n    parameters          %s\n    quantization        %s\n",
		d.Family, d.ParameterSize, d.QuantizationLevel)
	if n, ok := s.show.ModelInfo[d.Family+".context_length"]; ok {
		fmt.Fprintf(s.out, "    context length      %v\n", n)
	}
	if len(s.show.Capabilities) > 0 {
		fmt.Fprintf(s.out, "\n  Capabilities\n    %s\n", strings.Join(s.show.Capabilities, "\n    "))
	}
	if s.show.Parameters != "" {
		fmt.Fprintf(s.out, "\n  Parameters\n    %s\n", strings.ReplaceAll(s.show.Parameters, "\n", "\n    "))
	}
}

// setOption sets a generation option from its text: a number, true/false, or a string; stop accumulates.
func setOption(opts map[string]any, name, value string) error {
	var v any
	if err := json.Unmarshal([]byte(value), &v); err != nil {
		v = value
	}
	probe := api.DefaultOptions()
	if name == "stop" {
		s, ok := v.(string)
		if !ok {
			s = value
		}
		list, _ := opts["stop"].([]any)
		opts["stop"] = append(list, s)
		return nil
	}
	if err := probe.FromMap(map[string]any{name: v}); err != nil {
		return fmt.Errorf("parameter %q: %v", name, err)
	}
	opts[name] = v
	return nil
}

// repl runs the interactive session until /bye or end of input. Ctrl-C stops an answer in progress.
func (s *chatSession) repl(ctx context.Context, lr lineReader) error {
	fmt.Fprintln(s.out, `Send a message (/? for help)`)
	var multi []string
	inMulti := false
	for {
		prompt := ">>> "
		if inMulti {
			prompt = "... "
		}
		line, err := lr.ReadLine(prompt)
		if errors.Is(err, io.EOF) {
			fmt.Fprintln(s.out)
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case inMulti:
			if before, ok := strings.CutSuffix(line, `"""`); ok {
				multi = append(multi, before)
				inMulti = false
				line = strings.Join(multi, "\n")
				multi = nil
			} else {
				multi = append(multi, line)
				continue
			}
		case strings.HasPrefix(line, `"""`):
			rest := strings.TrimPrefix(line, `"""`)
			if before, ok := strings.CutSuffix(rest, `"""`); ok && rest != "" {
				line = before
				break
			}
			inMulti, multi = true, []string{rest}
			continue
		case strings.HasPrefix(strings.TrimSpace(line), "/"):
			quit, err := s.command(ctx, strings.TrimSpace(line))
			if err != nil {
				fmt.Fprintln(s.errw, "Error:", err)
			}
			if quit {
				return nil
			}
			continue
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		if err := s.sendInterruptible(ctx, line); err != nil {
			if errors.Is(err, context.Canceled) && ctx.Err() == nil {
				fmt.Fprintln(s.out)
				continue
			}
			fmt.Fprintln(s.errw, "Error:", err)
		}
	}
}

// sendInterruptible sends a message; Ctrl-C cancels that answer only.
func (s *chatSession) sendInterruptible(ctx context.Context, text string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	go func() {
		select {
		case <-sig:
			cancel()
		case <-ctx.Done():
		}
	}()
	return s.send(ctx, text)
}

// plainLines reads lines without echo control (pipes, tests).
type plainLines struct {
	sc  *bufio.Scanner
	out io.Writer
}

func (p *plainLines) ReadLine(prompt string) (string, error) {
	fmt.Fprint(p.out, prompt)
	if !p.sc.Scan() {
		if err := p.sc.Err(); err != nil {
			return "", err
		}
		return "", io.EOF
	}
	return p.sc.Text(), nil
}

// termLines edits lines on a terminal with history (kept in MLXG_HOME/history across sessions).
type termLines struct {
	fd   int
	raw  bool // put the terminal in raw mode while reading (false in tests)
	t    *term.Terminal
	in   *ctrlCReader
	out  io.Writer
	hist *fileHistory
}

// ctrlCReader turns Ctrl-C, which x/term reports as end of input like Ctrl-D (and leaves the typed text in
// place), into "go to the end, delete the line, Enter": ReadLine then returns an empty line it recognizes.
type ctrlCReader struct {
	r       io.Reader
	pending []byte
	ctrlC   int // Ctrl-C lines not yet returned
}

func (c *ctrlCReader) Read(p []byte) (int, error) {
	if len(c.pending) == 0 {
		buf := make([]byte, len(p))
		n, err := c.r.Read(buf)
		for _, b := range buf[:n] {
			if b == 3 {
				c.pending = append(c.pending, 5, 21, '\r') // ^E ^U Enter
				c.ctrlC++
			} else {
				c.pending = append(c.pending, b)
			}
		}
		if len(c.pending) == 0 {
			return 0, err
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

func newTermLines(in *os.File, out io.Writer) *termLines {
	h := &fileHistory{}
	if home, err := registry.HomeDir(); err == nil {
		h.load(filepath.Join(home, "history"))
	}
	cr := &ctrlCReader{r: in}
	t := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{cr, out}, "")
	t.History = h
	return &termLines{fd: int(in.Fd()), raw: true, t: t, in: cr, out: out, hist: h}
}

// ReadLine reads a line; Ctrl-C drops the line being typed (as in ollama), Ctrl-D on an empty line ends.
func (l *termLines) ReadLine(prompt string) (string, error) {
	for {
		line, err := l.readRaw(prompt)
		if err == nil && line == "" && l.in.ctrlC > 0 {
			l.in.ctrlC--
			fmt.Fprintln(l.out, "Use Ctrl + d or /bye to exit.")
			continue
		}
		return line, err
	}
}

func (l *termLines) readRaw(prompt string) (string, error) {
	if l.raw {
		old, err := term.MakeRaw(l.fd)
		if err != nil {
			return "", err
		}
		defer term.Restore(l.fd, old)
		if w, h, err := term.GetSize(l.fd); err == nil && w > 0 && h > 0 {
			_ = l.t.SetSize(w, h)
		}
	}
	l.t.SetPrompt(prompt)
	line, err := l.t.ReadLine()
	if errors.Is(err, term.ErrPasteIndicator) {
		err = nil
	}
	return line, err
}

// fileHistory is the line history, newest last in the file, at most 1000 lines.
type fileHistory struct {
	path  string
	lines []string
}

func (h *fileHistory) load(path string) {
	h.path = path
	if b, err := os.ReadFile(path); err == nil {
		h.lines = strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(h.lines) == 1 && h.lines[0] == "" {
			h.lines = nil
		}
	}
}

func (h *fileHistory) Add(entry string) {
	if entry == "" || (len(h.lines) > 0 && h.lines[len(h.lines)-1] == entry) {
		return
	}
	h.lines = append(h.lines, entry)
	if len(h.lines) > 1000 {
		h.lines = h.lines[len(h.lines)-1000:]
	}
	if h.path != "" && !strings.Contains(entry, "\n") {
		if err := os.MkdirAll(filepath.Dir(h.path), 0o755); err == nil {
			if f, err := os.OpenFile(h.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
				fmt.Fprintln(f, entry)
				f.Close()
			}
		}
	}
}

func (h *fileHistory) Len() int { return len(h.lines) }

func (h *fileHistory) At(i int) string { return h.lines[len(h.lines)-1-i] }
