package registry

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
)

// The Ollama library names users type resolve to mlx-community's MLX checkpoints; a bare family
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
		// The late-2026 families, and those mlxg ran before it could name them.
		{"gemma4", "mlx-community/gemma-4-e4b-it-4bit"},
		{"gemma4:latest", "mlx-community/gemma-4-e4b-it-4bit"},
		{"gemma4:e2b", "mlx-community/gemma-4-e2b-it-4bit"},
		{"gemma4:12b", "mlx-community/gemma-4-12B-it-4bit"},
		{"gemma4:26b", "mlx-community/gemma-4-26b-a4b-it-4bit"},
		{"gemma4:31b", "mlx-community/gemma-4-31b-it-4bit"},
		{"gpt-oss", "mlx-community/gpt-oss-20b-MXFP4-Q8"},
		{"gpt-oss:120b", "mlx-community/gpt-oss-120b-MXFP4-Q8"},
		{"glm-4.7-flash", "mlx-community/GLM-4.7-Flash-4bit"},
		{"GLM-4.7-Flash:latest", "mlx-community/GLM-4.7-Flash-4bit"},
		{"mistral-small3.2", "mlx-community/Mistral-Small-3.2-24B-Instruct-2506-4bit"},
		{"mistral-small3.2:24b", "mlx-community/Mistral-Small-3.2-24B-Instruct-2506-4bit"},
		{"devstral-small-2", "mlx-community/Devstral-Small-2-24B-Instruct-2512-4bit"},
		{"magistral", "mlx-community/Magistral-Small-2509-4bit"},
		{"ministral-3", "mlx-community/Ministral-3-8B-Instruct-2512-4bit"},
		{"ministral-3:3b", "mlx-community/Ministral-3-3B-Instruct-2512-4bit"},
		{"ministral-3:14b", "mlx-community/Ministral-3-14B-Instruct-2512-4bit"},
		{"phi4", "mlx-community/phi-4-4bit"},
		{"phi4-mini", "mlx-community/Phi-4-mini-instruct-4bit"},
		{"phi4-mini:3.8b", "mlx-community/Phi-4-mini-instruct-4bit"},
		{"qwen3.5", "mlx-community/Qwen3.5-9B-4bit"},
		{"qwen3.5:0.8b", "mlx-community/Qwen3.5-0.8B-4bit"},
		{"qwen3.5:35b", "mlx-community/Qwen3.5-35B-A3B-4bit"},
		{"qwen3.5:122b-a10b", "mlx-community/Qwen3.5-122B-A10B-4bit"},
		{"qwen3.6", "mlx-community/Qwen3.6-35B-A3B-4bit"},
		{"qwen3.6:27b", "mlx-community/Qwen3.6-27B-4bit"},
		{"qwen3-next", "mlx-community/Qwen3-Next-80B-A3B-Thinking-4bit"},
		{"qwen3-next:80b-a3b-instruct", "mlx-community/Qwen3-Next-80B-A3B-Instruct-4bit"},
	} {
		got, err := s.Lookup(mustParse(t, c.name))
		if err != nil || got.Repo != c.repo || got.Revision != DefaultRevision {
			t.Errorf("Lookup(%q) = %+v, %v; want %s", c.name, got, err, c.repo)
		}
	}
	// A tag a family lacks, a family that is a prefix of another's name, a size of another family.
	for _, name := range []string{"qwen3:9b", "qwen3-coder:8b", "llama3.2:latest-x", "qwen", "phi4:3.8b",
		"qwen3.5:8b", "gemma4:27b", "gpt-oss:20b-mxfp4", "glm-4.7", "mistral-small3.2:7b", "ministral-3:24b"} {
		if got, err := s.Lookup(mustParse(t, name)); err == nil {
			t.Errorf("Lookup(%q) = %+v, want not found", name, got)
		}
	}
}

// Every family has exactly one latest row, every row is a valid name and Hub repo, no name appears
// twice, and docs/models.md's table lists every row (and nothing else).
func TestLibraryTable(t *testing.T) {
	readme, err := os.ReadFile("../docs/models.md")
	if err != nil {
		t.Fatal(err)
	}
	latest := map[string]int{}
	seen := map[string]bool{}
	rows := 0
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
		switch _, tag, _ := strings.Cut(m.Name, ":"); {
		case m.Latest && tag == DefaultTag:
			row = "| `" + m.Name + "` (`" + family + "`) | `" + m.Repo + "` |"
		case m.Latest:
			row = "| `" + m.Name + "` (`" + family + "`, `" + family + ":latest`) | `" + m.Repo + "` |"
		}
		if !strings.Contains(string(readme), row) {
			t.Errorf("docs/models.md lacks the row %s", row)
		}
		rows++
	}
	for f, n := range latest {
		if n != 1 {
			t.Errorf("family %s has %d latest rows, want 1", f, n)
		}
	}
	documented := 0
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "| `") && strings.Contains(line, "| `mlx-community/") {
			documented++
		}
	}
	if documented != rows {
		t.Errorf("docs/models.md lists %d library names, the table has %d", documented, rows)
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

// A bare family name of the late-2026 families pulls the row marked latest, and list shows it by the
// name it was pulled by: a family whose only tag is latest (glm-4.7-flash) included.
func TestPullNewLibraryNames(t *testing.T) {
	for _, c := range []struct{ name, repo, listed string }{
		{"gemma4", "mlx-community/gemma-4-e4b-it-4bit", "gemma4:latest"},
		{"glm-4.7-flash", "mlx-community/GLM-4.7-Flash-4bit", "glm-4.7-flash:latest"},
		{"phi4-mini:3.8b", "mlx-community/Phi-4-mini-instruct-4bit", "phi4-mini:3.8b"},
	} {
		e := newPullEnv(t)
		fakeRepo(t, e.root, c.repo, 1000)
		m, _, err := e.pull(t, c.name)
		if err != nil || m.Repo != c.repo {
			t.Fatalf("pull %s: %+v, %v; want %s", c.name, m, err, c.repo)
		}
		list, err := e.store.List()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(list, func(l LocalModel) bool { return l.Name == c.listed && l.Repo == c.repo }) {
			t.Errorf("pull %s: list = %+v, want %s", c.name, list, c.listed)
		}
	}
}
