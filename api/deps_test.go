package api

import (
	"os/exec"
	"strings"
	"testing"
)

// A client program imports this package alone; it must not link the engine (runner, kvstore, metal),
// which the server in api/server brings in.
func TestNoEngineDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, pkg := range []string{"github.com/mlxg/mlxg/api", "github.com/mlxg/mlxg/api/openai", "github.com/mlxg/mlxg/api/anthropic"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, engine := range []string{"runner", "kvstore", "metal"} {
				p := "github.com/mlxg/mlxg/" + engine
				if dep == p || strings.HasPrefix(dep, p+"/") {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
