package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/registry/hubtest"
	"github.com/mlxg/mlxg/registry/safetensors"
)

// TestMain lets the test binary act as the mlxg command (MLXG_TEST_AS_CLI=1), so that tests can run
// real separate processes without building the binary.
func TestMain(m *testing.M) {
	if os.Getenv("MLXG_TEST_AS_CLI") == "1" {
		main()
		os.Exit(0)
	}
	code := m.Run()
	if cappedMoE.root != "" {
		os.RemoveAll(cappedMoE.root)
	}
	os.Exit(code)
}

// writeRepo writes a small quantized MLX checkpoint as a repo folder dir/org/tiny and returns the weights' size;
// pad > 0 adds an F16 tensor of that many elements.
func writeRepo(t *testing.T, dir string, pad int) int64 {
	t.Helper()
	repo := filepath.Join(dir, "org", "tiny")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := `{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3","hidden_size":64,"num_hidden_layers":2,
"num_attention_heads":2,"num_key_value_heads":1,"max_position_embeddings":8192,"vocab_size":256,
"quantization":{"group_size":32,"bits":4,"model.layers.1.mlp.down_proj":{"group_size":32,"bits":8}}}`
	files := map[string]string{
		"config.json":           cfg,
		"tokenizer_config.json": `{"chat_template":"{% for m in messages %}{{ m.content }}{% endfor %}"}`,
		"tokenizer.json":        `{"model":{"type":"BPE"}}`,
		"README.md":             "---\nlicense: apache-2.0\n---\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data := make([]byte, 256*64/8*4) // 256 x 8 uint32: 4-bit codes of a 256 x 64 embedding
	for i := range data {
		data[i] = byte(i*31 + 7)
	}
	scales := make([]byte, 256*2*2)
	for i := range scales {
		scales[i] = byte(i*13 + 1)
	}
	ts := []safetensors.Tensor{
		{TensorInfo: safetensors.TensorInfo{Name: "model.embed_tokens.weight", DType: safetensors.U32, Shape: []int{256, 8}}, Data: data},
		{TensorInfo: safetensors.TensorInfo{Name: "model.embed_tokens.scales", DType: safetensors.BF16, Shape: []int{256, 2}}, Data: scales},
		{TensorInfo: safetensors.TensorInfo{Name: "model.embed_tokens.biases", DType: safetensors.BF16, Shape: []int{256, 2}}, Data: scales},
	}
	if pad > 0 { // a bigger file, for tests that stop a download midway
		b := make([]byte, pad*2)
		for i := range b {
			b[i] = byte(i * 3)
		}
		ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: "model.norm.weight", DType: safetensors.F16, Shape: []int{pad}}, Data: b})
	}
	p := filepath.Join(repo, "model.safetensors")
	if err := safetensors.Write(p, ts, nil); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(p)
	return fi.Size()
}

// cliEnv points the CLI at a fake hub, a fresh cache and a port where no server listens.
func cliEnv(t *testing.T) (*hubtest.Server, string, int64) { return cliEnvPad(t, 0) }

func cliEnvPad(t *testing.T, pad int) (*hubtest.Server, string, int64) {
	t.Helper()
	root := t.TempDir()
	size := writeRepo(t, filepath.Join(root, "hub"), pad)
	h := hubtest.New(filepath.Join(root, "hub"))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	cache := filepath.Join(root, "cache")
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_TOKEN", "test")
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "")
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("MLXG_HOME", filepath.Join(root, "mlxg"))
	t.Setenv("MLXG_HOST", closed)
	t.Setenv("MLXG_PREFIX_DIR", filepath.Join(root, "prefix")) // a served model must not write into ~/.cache
	return h, cache, size
}

// mlxg runs the command in-process and returns its stdout and stderr.
func mlxg(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestCLIPullListShowCpRm(t *testing.T) {
	_, cache, _ := cliEnv(t)
	_, stderr, err := mlxg(t, "pull", "org/tiny")
	if err != nil {
		t.Fatalf("pull: %v\n%s", err, stderr)
	}
	for _, want := range []string{"pulling manifest", "pulling model.safetensors: ", "pulling config.json: ", "verifying sha256 digest", "success", "downloaded"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("pull output lacks %q:\n%s", want, stderr)
		}
	}
	ref, _ := os.ReadFile(filepath.Join(cache, "models--org--tiny", "refs", "main"))
	commit := string(ref)

	out, _, err := mlxg(t, "list")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[0], "MODIFIED") ||
		!strings.HasPrefix(lines[1], "org/tiny ") || !strings.Contains(lines[1], commit[:12]) || !strings.Contains(lines[1], "kB") {
		t.Errorf("list:\n%s", out)
	}

	out, _, err = mlxg(t, "show", "hf.co/org/tiny")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"architecture", "qwen3 (Qwen3ForCausalLM)", "context length      8192", "mixed-4/8bit",
		"KV cache layers     all 2", "chat template       yes", "mixed: 8bit g32 affine", "model.layers.1.mlp.down_proj", "apache-2.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = mlxg(t, "show", "--license", "org/tiny")
	if err != nil || strings.TrimSpace(out) != "apache-2.0" {
		t.Errorf("show --license: %q, %v", out, err)
	}

	if out, _, err = mlxg(t, "cp", "org/tiny", "mine"); err != nil || !strings.Contains(out, "copied 'org/tiny' to 'mine'") {
		t.Fatalf("cp: %q, %v", out, err)
	}
	out, _, _ = mlxg(t, "ls")
	if !strings.Contains(out, "mine:latest") || !strings.Contains(out, "org/tiny") {
		t.Errorf("list after cp:\n%s", out)
	}
	if out, _, err = mlxg(t, "rm", "org/tiny"); err != nil || !strings.Contains(out, "deleted 'org/tiny'") {
		t.Fatalf("rm: %q, %v", out, err)
	}
	out, _, _ = mlxg(t, "list")
	if strings.Contains(out, "org/tiny") || !strings.Contains(out, "mine:latest") {
		t.Errorf("list after rm of the source (the alias keeps its snapshot):\n%s", out)
	}
	if _, _, err = mlxg(t, "show", "mine"); err != nil {
		t.Errorf("show of the alias after rm of its source: %v", err)
	}
	if _, _, err = mlxg(t, "rm", "mine"); err != nil {
		t.Fatal(err)
	}
	out, _, _ = mlxg(t, "list")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 {
		t.Errorf("list after removing everything:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(cache, "models--org--tiny")); !os.IsNotExist(err) {
		t.Errorf("repo folder left behind: %v", err)
	}
}

func TestCLIErrors(t *testing.T) {
	h, _, _ := cliEnv(t)
	if _, _, err := mlxg(t, "pull", "../etc"); err == nil || !strings.Contains(err.Error(), "'..'") {
		t.Errorf("bad name: %v", err)
	}
	if _, _, err := mlxg(t, "pull", "org/nosuch"); err == nil || !strings.Contains(err.Error(), "no such repo") {
		t.Errorf("404: %v", err)
	}
	h.SetFaults(hubtest.Faults{Status: 401})
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", filepath.Join(t.TempDir(), "none"))
	if _, _, err := mlxg(t, "pull", "org/tiny"); err == nil || !strings.Contains(err.Error(), "set HF_TOKEN") {
		t.Errorf("401: %v", err)
	}
	if _, _, err := mlxg(t, "show", "org/tiny"); err == nil || !strings.Contains(err.Error(), "mlxg pull org/tiny") {
		t.Errorf("show of a model not pulled: %v", err)
	}
	if _, _, err := mlxg(t, "show", "--license", "--template", "org/tiny"); err == nil || !strings.Contains(err.Error(), "only one of") {
		t.Errorf("two show flags: %v", err)
	}
}

// A server answering at MLXG_HOST is used instead of the local store.
func TestCLIUsesServer(t *testing.T) {
	cliEnv(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/version" {
			w.Write([]byte(`{"version":"0.33.0","mlxg_version":"9.9.9"}`))
			return
		}
		if r.URL.Path != "/api/tags" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"models": []map[string]any{{"name": "from-server:latest", "model": "from-server:latest",
			"size": 1000, "digest": "0123456789abcdef0123", "modified_at": time.Now()}}})
	}))
	defer srv.Close()
	out, _, _ := mlxg(t, "version")
	if !strings.Contains(out, "could not connect") || !strings.Contains(out, "client version is "+version) {
		t.Errorf("version without a server: %q", out)
	}
	t.Setenv("MLXG_HOST", srv.URL)
	out, _, _ = mlxg(t, "version")
	if !strings.Contains(out, "mlxg version is 9.9.9 (Ollama API 0.33.0)") || !strings.Contains(out, "client version is "+version) {
		t.Errorf("version with a server: %q", out)
	}
	if out, _, err := mlxg(t, "--version"); err != nil || out != "mlxg version is "+version+" (Ollama API "+api.OllamaVersion+")\n" {
		t.Errorf("mlxg --version: %q, %v", out, err)
	}
	out, _, err := mlxg(t, "list")
	if err != nil || !strings.Contains(out, "from-server:latest") || !strings.Contains(out, "0123456789ab ") {
		t.Errorf("list through a server: %q, %v", out, err)
	}
}

// Two mlxg processes pulling one repo at once: one waits for the other, neither corrupts anything,
// and the weights cross the network once.
func TestCLIConcurrentPullProcesses(t *testing.T) {
	h, cache, size := cliEnv(t)
	h.SetFaults(hubtest.Faults{ChunkDelay: 200 * time.Millisecond})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for range 2 {
		c := exec.Command(exe, "pull", "org/tiny")
		c.Env = append(os.Environ(), "MLXG_TEST_AS_CLI=1")
		var b bytes.Buffer
		c.Stdout, c.Stderr = &b, &b
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, c), append(outs, &b)
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("pull process %d: %v\n%s", i, err, outs[i])
		}
	}
	if !strings.Contains(outs[0].String()+outs[1].String(), "waiting for another pull of org/tiny") {
		t.Errorf("neither pull waited:\n%s\n---\n%s", outs[0], outs[1])
	}
	if got := h.Served("model.safetensors"); got != size {
		t.Errorf("weights served %d bytes in all, want %d", got, size)
	}
	out, _, err := mlxg(t, "show", "org/tiny")
	if err != nil || !strings.Contains(out, "mixed-4/8bit") {
		t.Errorf("show after concurrent pulls: %v\n%s", err, out)
	}
	blobs, _ := os.ReadDir(filepath.Join(cache, "models--org--tiny", "blobs"))
	for _, b := range blobs {
		if strings.HasSuffix(b.Name(), ".incomplete") {
			t.Errorf("left %s", b.Name())
		}
	}
}

// The same flow through a running `mlxg serve` (another process): the CLI's client and the server's
// /api/pull (NDJSON), /api/tags, /api/show, /api/copy and /api/delete agree.
func TestCLIThroughServer(t *testing.T) {
	_, cache, _ := cliEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	t.Setenv("MLXG_HOST", addr)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	srv := exec.Command(exe, "serve")
	srv.Env = append(os.Environ(), "MLXG_TEST_AS_CLI=1")
	var log bytes.Buffer
	srv.Stdout, srv.Stderr = &log, &log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Process.Signal(os.Interrupt)
		srv.Wait()
	}()
	for i := 0; ; i++ {
		out, _, _ := mlxg(t, "version")
		if strings.Contains(out, "mlxg version is") {
			break
		}
		if i == 100 {
			t.Fatalf("mlxg serve did not answer at %s:\n%s", addr, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// From here on an in-process fallback would use another cache, and the checks below would fail.
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	_, stderr, err := mlxg(t, "pull", "org/tiny")
	if err != nil || !strings.Contains(stderr, "success") || !strings.Contains(stderr, "pulling model.safetensors: ") {
		t.Fatalf("pull through the server: %v\n%s\nserver log:\n%s", err, stderr, log.String())
	}
	if _, err := os.Stat(filepath.Join(cache, "models--org--tiny", "refs", "main")); err != nil {
		t.Fatalf("the server's pull did not write the store: %v", err)
	}
	out, _, err := mlxg(t, "show", "org/tiny")
	if err != nil || !strings.Contains(out, "mixed-4/8bit") || !strings.Contains(out, "all 2") {
		t.Errorf("show through the server: %v\n%s", err, out)
	}
	if _, _, err := mlxg(t, "cp", "org/tiny", "viaserver"); err != nil {
		t.Fatal(err)
	}
	out, _, _ = mlxg(t, "list")
	if !strings.Contains(out, "viaserver:latest") || !strings.Contains(out, "org/tiny") {
		t.Errorf("list through the server:\n%s", out)
	}
	if _, _, err := mlxg(t, "rm", "viaserver", "org/tiny"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := mlxg(t, "show", "org/tiny"); err == nil || !strings.Contains(err.Error(), "not") {
		t.Errorf("show after rm through the server: %v", err)
	}
	if _, _, err := mlxg(t, "pull", "org/nosuch"); err == nil || !strings.Contains(err.Error(), "no such repo") {
		t.Errorf("404 through the server: %v", err)
	}
}

// A pull process killed midway (a crash, no chance to clean up) leaves its partial file; the next
// pull resumes from it with a Range request and ends with the right bytes.
func TestCLIPullKilledThenRestarted(t *testing.T) {
	h, cache, size := cliEnvPad(t, 200_000) // 400 kB of weights
	h.SetFaults(hubtest.Faults{ChunkDelay: 100 * time.Millisecond})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(exe, "pull", "org/tiny")
	c.Env = append(os.Environ(), "MLXG_TEST_AS_CLI=1")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	blobs := filepath.Join(cache, "models--org--tiny", "blobs")
	var partial string
	deadline := time.Now().Add(10 * time.Second)
	for partial == "" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		m, _ := filepath.Glob(filepath.Join(blobs, "*.incomplete"))
		for _, p := range m {
			if fi, err := os.Stat(p); err == nil && fi.Size() > 0 && len(filepath.Base(p)) == 64+len(".incomplete") {
				partial = p
			}
		}
	}
	c.Process.Kill()
	c.Wait()
	if partial == "" {
		t.Fatal("the pull never started writing the weights")
	}
	fi, err := os.Stat(partial)
	if err != nil || fi.Size() == 0 || fi.Size() >= size {
		t.Fatalf("after the kill: %v, %v (want a partial file of the %d bytes)", fi, err, size)
	}
	kept := fi.Size()
	h.SetFaults(hubtest.Faults{})
	if _, stderr, err := mlxg(t, "pull", "org/tiny"); err != nil {
		t.Fatalf("pull after the kill: %v\n%s", err, stderr)
	}
	if r := h.Ranges(); !slices.Contains(r, fmt.Sprintf("bytes=%d-", kept)) {
		t.Errorf("after keeping %d bytes, the ranges asked were %q", kept, r)
	}
	out, _, err := mlxg(t, "show", "-v", "org/tiny")
	if err != nil || !strings.Contains(out, "model.norm.weight") {
		t.Errorf("show after the resumed pull: %v\n%s", err, out)
	}
}
