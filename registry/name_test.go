package registry

import (
	"strings"
	"testing"
)

func TestParseName(t *testing.T) {
	for _, c := range []struct{ in, repo, rev, bare string }{
		{"mlx-community/Qwen3-0.6B-4bit", "mlx-community/Qwen3-0.6B-4bit", "main", ""},
		{"mlx-community/Qwen3-0.6B-4bit:v1.0", "mlx-community/Qwen3-0.6B-4bit", "v1.0", ""},
		{"hf.co/org/name", "org/name", "main", ""},
		{"huggingface.co/org/name:refs/pr/1", "org/name", "refs/pr/1", ""},
		{"https://huggingface.co/org/name", "org/name", "main", ""},
		{"org/name:0123456789abcdef0123456789abcdef01234567", "org/name", "0123456789abcdef0123456789abcdef01234567", ""},
		{"qwen3:0.6b", "", "", "qwen3:0.6b"},
		{"MyModel", "", "", "mymodel:latest"},
		{"qwen3-tiny-q4", "", "", "qwen3-tiny-q4:latest"},
	} {
		n, err := ParseName(c.in)
		if err != nil {
			t.Errorf("ParseName(%q): %v", c.in, err)
			continue
		}
		if n.Repo != c.repo || (c.repo != "" && n.Revision != c.rev) || n.Bare != c.bare {
			t.Errorf("ParseName(%q) = %+v, want repo %q rev %q bare %q", c.in, n, c.repo, c.rev, c.bare)
		}
		back, err := ParseName(n.String())
		if err != nil || back != n {
			t.Errorf("ParseName(%q.String() = %q) = %+v, %v; want %+v", c.in, n.String(), back, err, n)
		}
	}
}

func TestParseNameRejects(t *testing.T) {
	for _, c := range []struct{ in, why string }{
		{"", "empty"},
		{"../etc/passwd", ".."},
		{"org/..", ".."},
		{"org/name:../../x", ".."},
		{"/abs/path", "absolute"},
		{`org\name`, "backslash"},
		{"org/na\x00me", "control"},
		{"org/na\nme", "control"},
		{"org/" + strings.Repeat("a", 300), "bytes long"},
		{"org/name/extra", "contains '/'"},
		{"org--x/name", "'--'"},
		{"org/name:", "empty revision"},
		{"hf.co/name", "organization"},
		{"org/-name", "starts or ends"},
		{"org/na me", "contains ' '"},
		{"bad name", "bare name"},
		{"org/name:refs/./x", "'.' path segment"},
		{"org/name:.", "'.' path segment"},
	} {
		_, err := ParseName(c.in)
		if err == nil {
			t.Errorf("ParseName(%q) accepted it", c.in)
			continue
		}
		if !strings.Contains(err.Error(), c.why) {
			t.Errorf("ParseName(%q) = %v; want it to say %q", c.in, err, c.why)
		}
	}
}

func TestRepoFolderAndDisplay(t *testing.T) {
	if got := repoFolder("mlx-community/Qwen3-0.6B-4bit"); got != "models--mlx-community--Qwen3-0.6B-4bit" {
		t.Errorf("repoFolder = %q", got)
	}
	for _, c := range [][3]string{
		{"local/foo", "main", "foo:latest"},
		{"local/foo", "q4", "foo:q4"},
		{"org/name", "main", "org/name"},
		{"org/name", "dev", "org/name:dev"},
	} {
		if got := displayName(c[0], c[1]); got != c[2] {
			t.Errorf("displayName(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}
