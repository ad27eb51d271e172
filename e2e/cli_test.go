package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mlxg runs the CLI against the test server.
func (s *server) mlxg(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(s.bin, args...)
	cmd.Env = append(os.Environ(), "MLXG_HOST="+strings.TrimPrefix(s.base, "http://"), "OLLAMA_HOST=",
		"HF_HUB_CACHE="+filepath.Join(s.tmp, "hub"), "MLXG_HOME="+filepath.Join(s.tmp, "home"), "MLXG_BACKEND=cpu")
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestCLI: run (one shot, through the server), ps and stop, as a user types them.
func TestCLI(t *testing.T) {
	s := start(t)
	out, err := s.mlxg(t, "", "run", model, "Weather?", "--think=false")
	if err != nil || out != "The weather in Paris is sunny.\n" {
		t.Fatalf("run: %v %q", err, out)
	}
	// Load it for ps (run loads it too when it goes through the server).
	resp, err := http.Post(s.base+"/api/generate", "application/json", strings.NewReader(`{"model":"scripted"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	out, err = s.mlxg(t, "", "ps")
	if err != nil || !strings.Contains(out, "KV CACHE") || !strings.Contains(out, model+":latest") || !strings.Contains(out, "100% CPU") {
		t.Fatalf("ps: %v\n%s", err, out)
	}
	if out, err = s.mlxg(t, "", "stop", "nope"); err == nil || !strings.Contains(out, `couldn't find model "nope" to stop`) {
		t.Fatalf("stop nope: %v %s", err, out)
	}
	if out, err = s.mlxg(t, "", "stop", model); err != nil {
		t.Fatalf("stop: %v %s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ = s.mlxg(t, "", "ps")
		if !strings.Contains(out, model) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running after stop:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
