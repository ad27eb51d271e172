package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
)

// TestNodeMessagesResponses runs the official @anthropic-ai/sdk on /v1/messages and openai-node's
// client.responses on /v1/responses (scripts/clienttest/messages.cjs) against the server: streamed and
// whole replies, a tool round trip on each, stop reasons and errors. The clients are installed by
// scripts/test into .testdata/clients.
func TestNodeMessagesResponses(t *testing.T) {
	nm := filepath.Join(testdata.Dir(), "clients", "node_modules")
	for _, pkg := range []string{"@anthropic-ai/sdk", "openai"} {
		if _, err := os.Stat(filepath.Join(nm, filepath.FromSlash(pkg), "package.json")); err != nil {
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
	cmd := exec.Command(node, filepath.Join(testdata.Root(), "scripts", "clienttest", "messages.cjs"))
	cmd.Env = append(os.Environ(), "MLXG_URL="+s.base, "MLXG_NODE_MODULES="+nm, "MLXG_MODEL="+model)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Log(s.logTail())
		t.Fatalf("node clients: %v", err)
	}
}
