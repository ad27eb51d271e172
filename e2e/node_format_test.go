package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
)

// TestNodeFormat runs ollama-js and openai-node on structured outputs (scripts/clienttest/format.cjs):
// format on chat (streamed, thinking left free) and generate, response_format json_schema (whole and
// streamed) and json_object, and the 400s for schema keywords that cannot be enforced. The clients are
// installed by scripts/test into .testdata/clients.
func TestNodeFormat(t *testing.T) {
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
	cmd := exec.Command(node, filepath.Join(testdata.Root(), "scripts", "clienttest", "format.cjs"))
	cmd.Env = append(os.Environ(), "MLXG_URL="+s.base, "MLXG_NODE_MODULES="+nm, "MLXG_MODEL="+model)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Log(s.logTail())
		t.Fatalf("node clients: %v", err)
	}
}
