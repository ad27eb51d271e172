package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Server is one engine's server process (mlxg serve or ollama serve), spoken to through
// Ollama's /api/generate, which both serve.
type Server struct {
	Name    string   // "mlxg" or "ollama"
	Bin     string   // executable
	Args    []string // e.g. serve --threads 2
	Env     []string // added to the environment
	LogPath string
	URL     string // http://127.0.0.1:port, set by Start

	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	rss  *rssWatch
}

// freePort asks the kernel for a loopback port nobody listens on.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start runs the server on a free loopback port (hostEnv names the variable that sets the
// address) and waits until it answers GET /.
func (s *Server) Start(ctx context.Context, hostEnv string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s.URL = "http://" + addr
	s.log, err = os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	s.cmd = exec.Command(s.Bin, s.Args...)
	s.cmd.Env = append(append(os.Environ(), s.Env...), hostEnv+"="+addr)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	newProcessGroup(s.cmd)
	if err := s.cmd.Start(); err != nil {
		s.log.Close()
		return fmt.Errorf("starting %s: %w", s.Bin, err)
	}
	s.done = make(chan struct{})
	go func() { s.cmd.Wait(); close(s.done) }()
	s.rss = watchRSS(s.cmd.Process.Pid, time.Second) // VmHWM keeps each process's peak between samples
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-s.done:
			return fmt.Errorf("%s exited at start-up; see its log %s", s.Name, s.LogPath)
		case <-ctx.Done():
			s.Stop()
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if resp, err := http.Get(s.URL + "/"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("%s did not answer on %s within 90 s; see its log %s", s.Name, s.URL, s.LogPath)
		}
	}
}

// Stop ends the server and its children (Ollama's runner): SIGTERM to the process group,
// then SIGKILL after 20 s. It returns the peak resident memory seen, in bytes.
func (s *Server) Stop() int64 {
	if s.cmd == nil {
		return 0
	}
	peak := s.rss.stop()
	signalGroup(s.cmd, false)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		signalGroup(s.cmd, true)
		<-s.done
	}
	signalGroup(s.cmd, true) // children that outlived their parent
	s.log.Close()
	s.cmd = nil
	return peak
}

// PeakRSS is the largest resident memory of the server's process tree so far, in bytes
// (0 where the OS does not tell).
func (s *Server) PeakRSS() int64 { return s.rss.peak() }

// Sample is one request's measurements.
type Sample struct {
	Engine       string `json:"engine"`
	Quant        string `json:"quant"`
	Scenario     string `json:"scenario"`
	Rep          int    `json:"rep"` // 0 is the warm-up
	PromptTokens int    `json:"prompt_tokens"`
	EvalTokens   int    `json:"eval_tokens"`
	PrefillTPS   Num    `json:"prefill_tps"` // prompt_eval_count / prompt_eval_duration
	DecodeTPS    Num    `json:"decode_tps"`  // eval_count / eval_duration
	TTFT         Num    `json:"ttft_s"`      // request sent to first streamed token, client side
	Wall         Num    `json:"wall_s"`
	Load1        Num    `json:"load1"` // the 1-minute load average when the request ended
}

// Num is a measured value; NaN (not measured, e.g. a decode rate of one token) is JSON null.
type Num float64

func (n Num) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(n)) || math.IsInf(float64(n), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(n))
}

func (n *Num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = Num(math.NaN())
		return nil
	}
	return json.Unmarshal(b, (*float64)(n))
}

// genRequest is the subset of Ollama's /api/generate request the bench sends.
type genRequest struct {
	Model     string         `json:"model"`
	Prompt    string         `json:"prompt"`
	Raw       bool           `json:"raw"`
	Stream    bool           `json:"stream"`
	KeepAlive int            `json:"keep_alive"` // seconds; negative: stay loaded
	Options   map[string]any `json:"options"`
}

// genChunk is one NDJSON line of the answer.
type genChunk struct {
	Response           string `json:"response"`
	Done               bool   `json:"done"`
	Error              string `json:"error"`
	PromptEvalCount    int    `json:"prompt_eval_count"`
	PromptEvalDuration int64  `json:"prompt_eval_duration"`
	EvalCount          int    `json:"eval_count"`
	EvalDuration       int64  `json:"eval_duration"`
}

var client = &http.Client{}

// Generate streams one raw completion and measures it.
func (s *Server) Generate(ctx context.Context, model, prompt string, options map[string]any) (Sample, error) {
	body, err := json.Marshal(genRequest{Model: model, Prompt: prompt, Raw: true, Stream: true, KeepAlive: -1, Options: options})
	if err != nil {
		return Sample{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/api/generate", bytes.NewReader(body))
	if err != nil {
		return Sample{}, err
	}
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return Sample{}, fmt.Errorf("%s: %w", s.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return Sample{}, fmt.Errorf("%s: /api/generate: %s: %s", s.Name, resp.Status, strings.TrimSpace(string(msg)))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var out Sample
	first := true
	for sc.Scan() {
		var c genChunk
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return Sample{}, fmt.Errorf("%s: bad NDJSON line %q: %w", s.Name, sc.Text(), err)
		}
		if c.Error != "" {
			return Sample{}, fmt.Errorf("%s: %s", s.Name, c.Error)
		}
		if first {
			out.TTFT = Num(time.Since(t0).Seconds())
			first = false
		}
		if c.Done {
			out.Wall = Num(time.Since(t0).Seconds())
			out.PromptTokens, out.EvalTokens = c.PromptEvalCount, c.EvalCount
			out.PrefillTPS = Num(rate(c.PromptEvalCount, c.PromptEvalDuration))
			out.DecodeTPS = Num(rate(c.EvalCount, c.EvalDuration))
			out.Load1 = Num(loadAverage())
			return out, nil
		}
	}
	if err := sc.Err(); err != nil {
		return Sample{}, fmt.Errorf("%s: reading the answer: %w", s.Name, err)
	}
	return Sample{}, fmt.Errorf("%s: the answer ended without a final (done) line", s.Name)
}

// rate is tokens per second, NaN when there is nothing to divide.
func rate(n int, ns int64) float64 {
	if n <= 0 || ns <= 0 {
		return nan
	}
	return float64(n) / (float64(ns) / 1e9)
}

// postJSON sends v to path and decodes the answer into out (when not nil).
func (s *Server) postJSON(ctx context.Context, path string, v, out any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusNotFound {
		return errNotFound
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", s.Name, path, resp.Status, strings.TrimSpace(string(raw)))
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

var errNotFound = errors.New("not found")

// loadAverage is the 1-minute load average (NaN where /proc/loadavg is missing).
func loadAverage() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nan
	}
	var l float64
	if _, err := fmt.Sscan(string(raw), &l); err != nil {
		return nan
	}
	return l
}

// rssWatch samples a process tree's peak resident memory until stopped.
type rssWatch struct {
	mu   sync.Mutex
	max  int64
	quit chan struct{}
	wg   sync.WaitGroup
}

func watchRSS(pid int, every time.Duration) *rssWatch {
	w := &rssWatch{quit: make(chan struct{})}
	w.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if n := treePeakRSS(pid); n > 0 {
				w.mu.Lock()
				w.max = max(w.max, n)
				w.mu.Unlock()
			}
			select {
			case <-w.quit:
				return
			case <-t.C:
			}
		}
	})
	return w
}

func (w *rssWatch) peak() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max
}

func (w *rssWatch) stop() int64 {
	close(w.quit)
	w.wg.Wait()
	return w.peak()
}
