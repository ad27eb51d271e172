package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// mlxg runs the CLI against the test server.
func (s *server) mlxg(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(s.bin, args...)
	cmd.Env = append(os.Environ(), "MLXG_HOST="+strings.TrimPrefix(s.base, "http://"), "OLLAMA_HOST=")
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
