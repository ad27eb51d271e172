package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
)

// TestNodeLogprobs runs ollama-js and openai-node on logprobs and the generate context
// (scripts/clienttest/logprobs.cjs): Ollama's and OpenAI's shapes as the real clients read them,
// streamed and whole, and the 400 for top_logprobs out of range. The clients are installed by
// scripts/test into .testdata/clients.
func TestNodeLogprobs(t *testing.T) {
	nm := filepath.Join(testdata.Dir(), "clients", "node_modules")
	for _, pkg := range []string{"ollama", "openai"} {
		if _, err := os.Stat(filepath.Join(nm, pkg, "package.json")); err != nil {
			if os.Getenv("MLXG_REQUIRE_TESTDATA") == "1" {
				t.Fatalf("npm package %s missing in %s (scripts/test installs it)", pkg, nm)
			}
			t.Skipf("npm package %s missing in %s; run scripts/test", pkg, nm)
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: the client tests need Node.js")
	}
	s := start(t)
	cmd := exec.Command(node, filepath.Join(testdata.Root(), "scripts", "clienttest", "logprobs.cjs"))
	cmd.Env = append(os.Environ(), "MLXG_URL="+s.base, "MLXG_NODE_MODULES="+nm, "MLXG_MODEL="+model)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Log(s.logTail())
		t.Fatalf("node clients: %v", err)
	}
}
