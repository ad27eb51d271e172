package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
)

// TestNodeCreate runs ollama-js on /api/create, /api/show and /api/version (scripts/clienttest/create.cjs):
// a model created FROM another with parameters, system, messages and license, then used. The client is
// installed by scripts/test into .testdata/clients.
func TestNodeCreate(t *testing.T) {
	nm := filepath.Join(testdata.Dir(), "clients", "node_modules")
	if _, err := os.Stat(filepath.Join(nm, "ollama", "package.json")); err != nil {
		if os.Getenv("MLXG_REQUIRE_TESTDATA") == "1" {
			t.Fatalf("npm package ollama missing in %s (scripts/test installs it)", nm)
		}
		t.Skipf("npm package ollama missing in %s; run scripts/test", nm)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: the client tests need Node.js")
	}
	s := start(t)
	cmd := exec.Command(node, filepath.Join(testdata.Root(), "scripts", "clienttest", "create.cjs"))
	cmd.Env = append(os.Environ(), "MLXG_URL="+s.base, "MLXG_NODE_MODULES="+nm, "MLXG_MODEL="+model)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Log(s.logTail())
		t.Fatalf("node client: %v", err)
	}
}
