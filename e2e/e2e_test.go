// Package e2e runs real, unmodified clients against a running `mlxg serve` on loopback: Ollama's Go API
// client (github.com/ollama/ollama/api), OpenAI's Go SDK (github.com/openai/openai-go/v3) and, through node,
// ollama-js and openai-node (scripts/clienttest). The server runs the scripted checkpoint of api/apitest
// (a real model whose replies are known) and pulls from a fake Hub (registry/hubtest). The programs people
// point at Ollama (the ollama CLI, Claude Code, Codex, the AI SDK, LangChain JS) run against the trained
// qwen3-tiny in the same server (agents_test.go). Tiny random Qwen3.5, Qwen2.5-VL, Gemma 3 and Gemma 4 models
// with vision towers take images from the ollama CLI, openai-node and the Anthropic SDK, the Qwen3.5 one also
// from the dashboard's chat page (vision_test.go).
//
// This is a separate module so that the product's go.mod stays free of the client SDKs.
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/hubtest"
)

// The names the tests use.
const (
	model    = "scripted"           // imported into the store before the server starts
	pullRepo = "mlxg-test/scripted" // on the fake hub
)

type server struct {
	base    string // http://127.0.0.1:PORT
	bin     string // the mlxg binary
	logPath string
	cmd     *exec.Cmd
	worker  *exec.Cmd // rank 1, when MLXG_E2E_RANKS=2
	hub     *httptest.Server
	tmp     string
}

var (
	setupOnce sync.Once
	srv       *server
	setupErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if srv != nil {
		srv.stop()
	}
	os.Exit(code)
}

// backend is the compute backend the server runs on: MLXG_E2E_BACKEND (scripts/test
// runs the clients again with mlx where libmlxc is built, MLXG_MLXC_PATH passing
// through), else cpu.
func backend() string {
	if b := os.Getenv("MLXG_E2E_BACKEND"); b != "" {
		return b
	}
	return "cpu"
}

// start builds mlxg, writes the scripted checkpoint into a fake hub and a store, and starts `mlxg serve`.
func start(t *testing.T) *server {
	t.Helper()
	tokDir := testdata.Tokenizer(t, "qwen3")
	setupOnce.Do(func() { srv, setupErr = launch(tokDir) })
	if setupErr != nil {
		if srv != nil {
			t.Log(srv.logTail())
		}
		t.Fatal(setupErr)
	}
	return srv
}

func launch(tokDir string) (*server, error) {
	tmp, err := os.MkdirTemp("", "mlxg-e2e-")
	if err != nil {
		return nil, err
	}
	s := &server{tmp: tmp, logPath: filepath.Join(tmp, "serve.log"), bin: filepath.Join(tmp, "mlxg")}
	bin := s.bin
	build := exec.Command("go", "build", "-C", "..", "-o", bin, "./cmd/mlxg")
	if out, err := build.CombinedOutput(); err != nil {
		return s, fmt.Errorf("building mlxg: %v\n%s", err, out)
	}
	repo := filepath.Join(tmp, "hubrepos", filepath.FromSlash(pullRepo))
	if err := apitest.WriteScripted(repo, tokDir, apitest.Qwen3); err != nil {
		return s, err
	}
	store := &registry.Store{HubCache: filepath.Join(tmp, "hub"), Home: filepath.Join(tmp, "home")}
	n, _ := registry.ParseName(model)
	if _, err := store.ImportDir(context.Background(), n, repo); err != nil {
		return s, err
	}
	s.hub = httptest.NewServer(hubtest.New(filepath.Join(tmp, "hubrepos")))

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return s, err
	}
	addr := l.Addr().String()
	l.Close()
	s.base = "http://" + addr
	logf, err := os.Create(s.logPath)
	if err != nil {
		return s, err
	}
	s.cmd = exec.Command(bin, "serve")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.Env = append(os.Environ(), "MLXG_HOST="+addr, "OLLAMA_HOST=", "HF_HUB_CACHE="+store.HubCache,
		"MLXG_HOME="+store.Home, "HF_ENDPOINT="+s.hub.URL, "HF_TOKEN=", "MLXG_BACKEND="+backend(), "MLXG_KEEP_ALIVE=5m",
		"MLXG_ORIGINS=", "OLLAMA_ORIGINS=", "MLXG_PREFIX_DIR="+filepath.Join(tmp, "prefix"), "MLX_RANK=", "MLX_HOSTFILE=", "MLXG_HOSTFILE=")
	if ranks() == 2 {
		// Two ranks on loopback: this server is rank 0, a worker process rank 1, every
		// model split between them by layers (MLX's ring backend).
		hostfile, err := writeHostfile(tmp)
		if err != nil {
			return s, err
		}
		s.cmd.Args = append(s.cmd.Args, "--hostfile", hostfile)
		s.worker = exec.Command(bin, "worker", "--hostfile", hostfile, "--rank", "1")
		s.worker.Stdout, s.worker.Stderr = logf, logf
		// Its own prefix-cache folder: each rank keeps its own layers' blocks.
		s.worker.Env = append(append([]string(nil), s.cmd.Env...), "MLXG_PREFIX_DIR="+filepath.Join(tmp, "prefix-rank1"))
		if err := s.worker.Start(); err != nil {
			return s, err
		}
	}
	if err := s.cmd.Start(); err != nil {
		return s, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.base + "/")
		if err == nil {
			resp.Body.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("mlxg serve did not answer on %s within 60s", addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return "mlxg serve log:\n" + string(b)
}

func (s *server) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = s.cmd.Process.Kill()
		}
	}
	if s.worker != nil && s.worker.Process != nil {
		// It ends when rank 0 stops it or goes away.
		done := make(chan struct{})
		go func() { _ = s.worker.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = s.worker.Process.Kill()
		}
	}
	if s.hub != nil {
		s.hub.Close()
	}
	os.RemoveAll(s.tmp)
}

// ranks is the number of processes the server runs as: MLXG_E2E_RANKS (scripts/test runs
// the clients a third time against two ranks on the MLX backend), else 1.
func ranks() int {
	if os.Getenv("MLXG_E2E_RANKS") == "2" {
		return 2
	}
	return 1
}

// writeHostfile writes an MLX ring hostfile of two loopback addresses on free ports.
func writeHostfile(dir string) (string, error) {
	var hosts []string
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		hosts = append(hosts, fmt.Sprintf("[%q]", l.Addr().String()))
		l.Close()
	}
	path := filepath.Join(dir, "hostfile.json")
	return path, os.WriteFile(path, []byte("["+strings.Join(hosts, ",")+"]"), 0o644)
}

func (s *server) url(t *testing.T) *url.URL {
	u, err := url.Parse(s.base)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// goroutines reads go_goroutines from the server's /metrics.
func (s *server) goroutines(t *testing.T) int {
	t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
	}
	t.Fatal("no go_goroutines in /metrics")
	return 0
}

func readAll(t *testing.T, r io.Reader) string {
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
