package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mlxg create NAME -f Modelfile, in-process (no server answers): FROM a Hub repo not pulled yet (pulled
// first), FROM a local checkpoint folder (uploaded as blobs), and a refused TEMPLATE line.
func TestCLICreateModelfile(t *testing.T) {
	_, cache, _ := cliEnv(t)
	root := filepath.Dir(cache)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mf := write("Modelfile", `# a comment
FROM org/tiny
PARAMETER num_ctx 2048
PARAMETER stop "<|im_end|>"
PARAMETER stop END
SYSTEM """You answer
in one line."""
MESSAGE user Hi
LICENSE MIT-0
`)
	_, stderr, err := mlxg(t, "create", "mine", "-f", mf)
	if err != nil || !strings.Contains(stderr, "pulling manifest") || !strings.Contains(stderr, "writing manifest") {
		t.Fatalf("create -f: %v\n%s", err, stderr)
	}
	out, _, err := mlxg(t, "show", "mine", "--parameters")
	if err != nil || !strings.Contains(out, "num_ctx          2048") || !strings.Contains(out, `stop             "<|im_end|>"`) || !strings.Contains(out, `stop             "END"`) {
		t.Errorf("show --parameters: %q, %v", out, err)
	}
	if out, _, err := mlxg(t, "show", "mine"); err != nil || !strings.Contains(out, "System") || !strings.Contains(out, "You answer") {
		t.Errorf("show: %q, %v", out, err)
	}
	out, _, err = mlxg(t, "show", "mine", "--modelfile")
	if err != nil || !strings.Contains(out, "SYSTEM \"\"\"You answer\nin one line.\"\"\"") || !strings.Contains(out, `MESSAGE user """Hi"""`) {
		t.Errorf("show --modelfile: %q, %v", out, err)
	}
	if out, _, _ := mlxg(t, "show", "mine", "--license"); !strings.Contains(out, "apache-2.0") || !strings.Contains(out, "MIT-0") {
		t.Errorf("show --license: %q", out)
	}

	// FROM a folder: the fake hub's copy of org/tiny, an MLX checkpoint.
	folder := filepath.Join(root, "hub", "org", "tiny")
	mf2 := write("Modelfile2", "FROM "+folder+"\nPARAMETER temperature 0.3\n")
	if _, stderr, err := mlxg(t, "create", "fromdir", "-f", mf2); err != nil || !strings.Contains(stderr, "copying file model.safetensors") {
		t.Fatalf("create -f FROM a folder: %v\n%s", err, stderr)
	}
	if out, _, err := mlxg(t, "show", "fromdir", "--parameters"); err != nil || !strings.Contains(out, "temperature      0.3") {
		t.Errorf("fromdir parameters: %q, %v", out, err)
	}
	if out, _, _ := mlxg(t, "list"); !strings.Contains(out, "mine:latest") || !strings.Contains(out, "fromdir:latest") {
		t.Errorf("list:\n%s", out)
	}

	for body, msg := range map[string]string{
		"FROM org/tiny\nTEMPLATE {{ .Prompt }}\n": "TEMPLATE is not supported",
		"FROM org/tiny\nPARAMETER num_ctxx 1\n":   "unknown parameter",
		"FROM org/tiny\nPARAMETER num_ctx big\n":  "want an integer",
		"PARAMETER num_ctx 1\n":                   "no FROM line",
		"FROM org/tiny\nSYSTEM \"\"\"open\n":      "unterminated",
		"FROM org/tiny\nMESSAGE robot hi\n":       "needs a role",
		"FROM org/tiny\nFOO bar\n":                "unknown instruction",
	} {
		if _, _, err := mlxg(t, "create", "bad", "-f", write("Bad", body)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want an error saying %q", body, err, msg)
		}
	}
	if _, _, err := mlxg(t, "create", "bad", "-f", mf, "--from", folder); err == nil {
		t.Error("-f with --from accepted")
	}
	// Without -f or --from, ./Modelfile is read, as ollama create does.
	t.Chdir(dir)
	write("Modelfile", "FROM mine\nPARAMETER seed 7\n")
	if _, stderr, err := mlxg(t, "create", "fromcwd"); err != nil {
		t.Fatalf("create with ./Modelfile: %v\n%s", err, stderr)
	}
	if out, _, err := mlxg(t, "show", "fromcwd", "--parameters"); err != nil || !strings.Contains(out, "seed             7") || !strings.Contains(out, "num_ctx          2048") {
		t.Errorf("fromcwd parameters: %q, %v", out, err)
	}
}
