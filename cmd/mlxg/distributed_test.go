package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/pipeline"
)

const (
	envDistWorker = "MLXG_TEST_DIST_WORKER" // the hostfile, in the worker process
	envDistServer = "MLXG_TEST_DIST_SERVER" // set in the process that runs rank 0
)

// TestDistributedServeRankDies runs `serve --hostfile` as rank 0 and `worker` as rank 1,
// each in a process of its own (this test binary again), over MLX's ring on loopback:
// a generation works across the two; once the worker is killed, the next request fails
// with the error naming the rank, and the server keeps answering.
func TestDistributedServeRankDies(t *testing.T) {
	if hf := os.Getenv(envDistWorker); hf != "" {
		if err := runWorker(context.Background(), os.Stderr, hf, 1, 0, new(kvstore.Options), new(kvstore.PrefixOptions)); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)")
	}
	if os.Getenv(envDistServer) == "" {
		// Rank 0 runs in a child process too: its transfer to the dead rank stays stuck in
		// MLX (the real server exits, exitStuck), holding MLX's lock, and every later test
		// of this process that used MLX (TestDoctorReport) would wait for it forever.
		cmd := exec.Command(os.Args[0], "-test.run=^TestDistributedServeRankDies$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), envDistServer+"=1")
		out, err := cmd.CombinedOutput()
		if err == nil && strings.Contains(string(out), "--- SKIP: TestDistributedServeRankDies") {
			t.Skipf("rank 0's process skipped:\n%s", out)
		}
		if err != nil || !strings.Contains(string(out), "--- PASS: TestDistributedServeRankDies") {
			t.Fatalf("rank 0's process: %v\n%s", err, out)
		}
		return
	}
	mlxtest.Lib(t)
	tmp := t.TempDir()
	repo := filepath.Join(tmp, "repo")
	if err := apitest.WriteScripted(repo, testdata.Tokenizer(t, "qwen3"), apitest.Qwen3); err != nil {
		t.Fatal(err)
	}
	store := &registry.Store{HubCache: filepath.Join(tmp, "hub"), Home: filepath.Join(tmp, "home")}
	n, _ := registry.ParseName("scripted")
	if _, err := store.ImportDir(context.Background(), n, repo); err != nil {
		t.Fatal(err)
	}
	hostfile := mlxtest.Hostfile(t, tmp, 2)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	env := map[string]string{"MLXG_BACKEND": "mlx", "HF_HUB_CACHE": store.HubCache, "MLXG_HOME": store.Home,
		"MLXG_HOST": addr, "OLLAMA_HOST": "", "MLXG_PREFIX_DIR": filepath.Join(tmp, "prefix"), "MLX_RANK": "", "MLXG_HOSTFILE": ""}
	for k, v := range env {
		t.Setenv(k, v)
	}
	worker := exec.Command(os.Args[0], "-test.run=^TestDistributedServeRankDies$", "-test.count=1")
	worker.Env = append(os.Environ(), envDistWorker+"="+hostfile, "MLXG_PREFIX_DIR="+filepath.Join(tmp, "prefix-rank1"))
	wlog, _ := os.Create(filepath.Join(tmp, "worker.log"))
	worker.Stdout, worker.Stderr = wlog, wlog
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	defer worker.Process.Kill()

	exited := make(chan struct{})
	prevExit := exitStuck
	exitStuck = func() { close(exited) }
	defer func() { exitStuck = prevExit }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	servelog := filepath.Join(tmp, "serve.log")
	logf, _ := os.Create(servelog)
	go func() {
		served <- serve(ctx, logf, new(kvstore.Options), new(kvstore.PrefixOptions), 0, time.Second, hostfile, 0, "")
	}()
	base := "http://" + addr
	deadline := time.Now().Add(90 * time.Second)
	for {
		if resp, err := http.Get(base + "/"); err == nil {
			resp.Body.Close()
			break
		}
		select {
		case err := <-served:
			t.Fatalf("serve ended: %v\n%s", err, readFile(servelog))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not answer\n%s", readFile(servelog))
		}
		time.Sleep(100 * time.Millisecond)
	}
	gen := func() (int, string) {
		resp, err := http.Post(base+"/api/generate", "application/json",
			strings.NewReader(`{"model":"scripted","prompt":"Hello","stream":false,"options":{"num_predict":4}}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := gen(); code != 200 {
		t.Fatalf("generate over two ranks: %d %s\n%s", code, body, readFile(servelog))
	}
	var ps struct {
		Models []struct {
			Ranks []struct {
				Rank          int
				Layers, State string
			} `json:"ranks"`
		} `json:"models"`
	}
	getJSON(t, base+"/api/ps", &ps)
	if len(ps.Models) != 1 || len(ps.Models[0].Ranks) != 2 || ps.Models[0].Ranks[1].State != "ready" {
		t.Fatalf("ps: %+v", ps)
	}
	worker.Process.Kill()
	worker.Wait()
	var code int
	var body string
	for range 50 { // the liveness connection's end may take a moment to be seen
		if code, body = gen(); code != 200 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code == 200 || !strings.Contains(body, "rank 1") || !strings.Contains(body, pipeline.ErrRankFailed.Error()) {
		t.Fatalf("after the worker died: %d %s", code, body)
	}
	t.Logf("after the worker died: %d %s", code, body)
	resp, err := http.Get(base + "/api/tags")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the server stopped answering: %v %v", err, resp)
	}
	resp.Body.Close()
	getJSON(t, base+"/api/ps", &ps)
	if len(ps.Models) != 1 || ps.Models[0].Ranks[1].State != "gone" {
		t.Errorf("ps after the worker died: %+v", ps)
	}
	// Shutting down with a broken pipeline ends the process after the grace (1 s here)
	// and 5 s more: its stuck transfer would hold the unload forever.
	cancel()
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Errorf("the server did not exit after shutting down with a lost rank\n%s", readFile(servelog))
	}
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(fmt.Errorf("%s: %w", url, err))
	}
}

func TestWorkerArgs(t *testing.T) {
	t.Setenv("MLX_RANK", "")
	for _, c := range []struct {
		hostfile string
		rank     int
		want     string
	}{
		{"", 1, "needs the hostfile"},
		{"hosts.json", -1, "needs its rank"},
		{"hosts.json", 0, "rank 0 is `mlxg serve"},
	} {
		err := runWorker(context.Background(), io.Discard, c.hostfile, c.rank, 0, new(kvstore.Options), new(kvstore.PrefixOptions))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("hostfile %q rank %d: %v, want %q", c.hostfile, c.rank, err, c.want)
		}
	}
}
