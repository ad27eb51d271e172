package registry

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
)

// The Ollama library names users type resolve to mlx-community's 4-bit checkpoints; a bare family
// name is family:latest, the size Ollama's library tags latest.
func TestLibraryNames(t *testing.T) {
	s := testStore(t)
	for _, c := range []struct{ name, repo string }{
		{"llama3.2", "mlx-community/Llama-3.2-3B-Instruct-4bit"},
		{"llama3.2:1b", "mlx-community/Llama-3.2-1B-Instruct-4bit"},
		{"qwen3", "mlx-community/Qwen3-8B-4bit"},
		{"Qwen3:latest", "mlx-community/Qwen3-8B-4bit"},
		{"qwen3:8b", "mlx-community/Qwen3-8B-4bit"},
		{"qwen3:30b", "mlx-community/Qwen3-30B-A3B-4bit"},
		{"gemma3", "mlx-community/gemma-3-4b-it-4bit"},
		{"mistral", "mlx-community/Mistral-7B-Instruct-v0.3-4bit"},
		{"qwen2.5-coder:7b", "mlx-community/Qwen2.5-Coder-7B-Instruct-4bit"},
		{"qwen2.5-coder", "mlx-community/Qwen2.5-Coder-7B-Instruct-4bit"},
		{"deepseek-r1:8b", "mlx-community/DeepSeek-R1-0528-Qwen3-8B-4bit"},
		{"deepseek-r1", "mlx-community/DeepSeek-R1-0528-Qwen3-8B-4bit"},
		{"qwen3-coder", "mlx-community/Qwen3-Coder-30B-A3B-Instruct-4bit"},
	} {
		got, err := s.Lookup(mustParse(t, c.name))
		if err != nil || got.Repo != c.repo || got.Revision != DefaultRevision {
			t.Errorf("Lookup(%q) = %+v, %v; want %s", c.name, got, err, c.repo)
		}
	}
	for _, name := range []string{"qwen3:9b", "qwen3-coder:8b", "llama3.2:latest-x", "qwen"} {
		if got, err := s.Lookup(mustParse(t, name)); err == nil {
			t.Errorf("Lookup(%q) = %+v, want not found", name, got)
		}
	}
}

// Every family has exactly one latest row, every row is a valid name and Hub repo, no name appears
// twice, and README's table lists every row.
func TestLibraryTable(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	latest := map[string]int{}
	seen := map[string]bool{}
	for _, m := range Library {
		n, err := ParseName(m.Name)
		if err != nil || n.Bare != m.Name {
			t.Errorf("%q is not a bare name as ParseName gives it: %+v, %v", m.Name, n, err)
		}
		r, err := ParseName(m.Repo)
		if err != nil || r.Repo != m.Repo || !strings.HasPrefix(m.Repo, "mlx-community/") {
			t.Errorf("%s: repo %q: %+v, %v", m.Name, m.Repo, r, err)
		}
		if seen[m.Name] {
			t.Errorf("%s listed twice", m.Name)
		}
		seen[m.Name] = true
		family, _, _ := strings.Cut(m.Name, ":")
		if _, ok := latest[family]; !ok {
			latest[family] = 0
		}
		if m.Latest {
			latest[family]++
		}
		row := "| `" + m.Name + "` | `" + m.Repo + "` |"
		if m.Latest {
			row = "| `" + m.Name + "` (`" + family + "`, `" + family + ":latest`) | `" + m.Repo + "` |"
		}
		if !strings.Contains(string(readme), row) {
			t.Errorf("README.md lacks the row %s", row)
		}
	}
	for f, n := range latest {
		if n != 1 {
			t.Errorf("family %s has %d latest rows, want 1", f, n)
		}
	}
}

// pull, then resolve (what run and show do), by a library name: the checkpoint is the table's repo.
func TestPullLibraryName(t *testing.T) {
	e := newPullEnv(t)
	fakeRepo(t, e.root, "mlx-community/Qwen3-8B-4bit", 1000)
	m, _, err := e.pull(t, "qwen3")
	if err != nil {
		t.Fatal(err)
	}
	if m.Repo != "mlx-community/Qwen3-8B-4bit" {
		t.Fatalf("pull qwen3 stored %s", m.Repo)
	}
	r, err := e.store.Resolve(mustParse(t, "qwen3:8b"))
	if err != nil || r.Dir != m.Dir || r.Name != "qwen3:8b" {
		t.Fatalf("resolve qwen3:8b = %+v, %v; pulled %s", r, err, m.Dir)
	}
	// list shows the name it was pulled by (as Ollama does), beside the repo; rm of either removes both.
	names := func() []string {
		list, err := e.store.List()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range list {
			out = append(out, m.Name)
		}
		slices.Sort(out)
		return out
	}
	if got := names(); !slices.Equal(got, []string{"mlx-community/Qwen3-8B-4bit", "qwen3:latest"}) {
		t.Fatalf("list after pull qwen3 = %v", got)
	}
	if _, _, err := e.pull(t, "qwen3:8b"); err != nil {
		t.Fatal(err)
	}
	if got := names(); !slices.Equal(got, []string{"mlx-community/Qwen3-8B-4bit", "qwen3:8b", "qwen3:latest"}) {
		t.Fatalf("list after pull qwen3:8b = %v", got)
	}
	if _, err := e.store.Remove(context.Background(), mustParse(t, "qwen3")); err != nil {
		t.Fatal(err)
	}
	if got := names(); len(got) != 0 {
		t.Fatalf("list after rm qwen3 = %v", got)
	}
}
