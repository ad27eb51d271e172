package compute

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The layering the backend registry exists for, checked on the module's import graph:
// only main packages (cmd/mlxg and the scripts: the programs that decide which backends
// are built in) and metal's own packages may depend on metal, and the test model
// generator enters the mlxg binary only through runner/backend, whose whole-model check
// (`mlxg doctor`) writes a tiny random checkpoint of each architecture on the user's
// machine: nothing that loads or serves a model may import it.
func TestLayering(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, serr := os.Stat(gobin); serr != nil {
			t.Skip("no go command to list the module's packages")
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	const (
		module    = "github.com/mlxg/mlxg"
		metal     = module + "/metal"
		randmodel = module + "/registry/randmodel"
		doctor    = module + "/runner/backend"
	)
	goList := func(env []string, args ...string) []string {
		t.Helper()
		cmd := exec.Command(gobin, append([]string{"list"}, args...)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			msg := ""
			if ee, ok := err.(*exec.ExitError); ok {
				msg = string(ee.Stderr)
			}
			t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, msg)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	// Imports can differ by platform: the host's, and the two release targets.
	for _, env := range [][]string{{}, {"GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=0"}, {"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0"}} {
		where := "this platform"
		if len(env) > 0 {
			where = strings.Join(env[:2], " ")
		}
		checked := 0
		for _, line := range goList(env, "-f", "{{.ImportPath}} {{.Name}} {{join .Deps \" \"}}", "./...") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			path, name, deps := f[0], f[1], f[2:]
			checked++
			if name == "main" || path == metal || strings.HasPrefix(path, metal+"/") {
				continue
			}
			for _, d := range deps {
				if d == metal {
					t.Errorf("%s: %s depends on %s: open backends by name (compute.Open), and import metal only in a main package", where, path, metal)
				}
			}
		}
		if checked < 20 {
			t.Fatalf("%s: only %d packages listed", where, checked)
		}
		for _, line := range goList(env, "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./cmd/mlxg") {
			f := strings.Fields(line)
			if len(f) == 0 || f[0] == doctor {
				continue
			}
			for _, d := range f[1:] {
				if d == randmodel {
					t.Errorf("%s: %s imports %s, the test model generator: only the doctor's checks (%s) may", where, f[0], randmodel, doctor)
				}
			}
		}
	}
}
