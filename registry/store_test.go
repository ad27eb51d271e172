package registry

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testStore(t *testing.T) *Store {
	t.Helper()
	root := t.TempDir()
	return &Store{HubCache: filepath.Join(root, "hub"), Home: filepath.Join(root, "mlxg")}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func mustParse(t *testing.T, s string) Name {
	t.Helper()
	n, err := ParseName(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestImportResolveListCopyRemove(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	src := t.TempDir()
	writeFiles(t, src, map[string]string{
		"config.json":       `{"model_type":"qwen3"}`,
		"model.safetensors": "weights-v1",
		"tokenizer.json":    "{}",
	})
	m, err := s.ImportDir(ctx, mustParse(t, "tiny-q4"), src)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "tiny-q4:latest" || m.Repo != "local/tiny-q4" || m.Revision != "main" || len(m.Commit) != 40 {
		t.Fatalf("imported model = %+v", m)
	}
	if m.Size != int64(len(`{"model_type":"qwen3"}`)+len("weights-v1")+2) {
		t.Errorf("size = %d", m.Size)
	}
	b, err := os.ReadFile(filepath.Join(m.Dir, "model.safetensors"))
	if err != nil || string(b) != "weights-v1" {
		t.Fatalf("snapshot file: %q, %v", b, err)
	}
	link, _ := os.Readlink(filepath.Join(m.Dir, "model.safetensors"))
	if !strings.HasPrefix(link, "../../blobs/") || len(filepath.Base(link)) != 64 {
		t.Errorf("snapshot link = %q, want ../../blobs/<sha256>", link)
	}
	ref, _ := os.ReadFile(filepath.Join(s.HubCache, "models--local--tiny-q4", "refs", "main"))
	if string(ref) != m.Commit {
		t.Errorf("refs/main = %q, want %q", ref, m.Commit)
	}
	// The same content gets the same commit; a change gets another.
	again, err := s.ImportDir(ctx, mustParse(t, "tiny-q4"), src)
	if err != nil || again.Commit != m.Commit {
		t.Fatalf("re-import: %v, commit %s vs %s", err, again.Commit, m.Commit)
	}

	cp, err := s.Copy(mustParse(t, "tiny-q4"), mustParse(t, "mine:v1"))
	if err != nil || cp.Commit != m.Commit || cp.Name != "mine:v1" {
		t.Fatalf("copy: %+v, %v", cp, err)
	}
	if _, err := s.Copy(mustParse(t, "tiny-q4"), mustParse(t, "org/other")); err == nil {
		t.Error("copy to a repo name was accepted")
	}
	writeFiles(t, src, map[string]string{"model.safetensors": "weights-v2"})
	m2, err := s.ImportDir(ctx, mustParse(t, "tiny-q4"), src)
	if err != nil || m2.Commit == m.Commit {
		t.Fatalf("changed import: %v, same commit %v", err, m2.Commit == m.Commit)
	}
	// The alias stays pinned to the first commit.
	if got, _ := s.Resolve(mustParse(t, "mine:v1")); got == nil || got.Commit != m.Commit {
		t.Errorf("alias moved: %+v", got)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, l := range list {
		names[l.Name] = l.Commit
	}
	if len(list) != 2 || names["tiny-q4:latest"] != m2.Commit || names["mine:v1"] != m.Commit {
		t.Fatalf("list = %+v", list)
	}

	// rm of the model: its ref and new snapshot go; the alias keeps the old snapshot and its blobs.
	r, err := s.Remove(ctx, mustParse(t, "tiny-q4"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Alias || len(r.Snapshots) != 1 || r.Snapshots[0] != m2.Commit || r.Blobs != 1 {
		t.Errorf("removed %+v, want snapshot %s and 1 blob", r, m2.Commit)
	}
	if _, err := s.Resolve(mustParse(t, "tiny-q4")); !errors.Is(err, ErrNotFound) {
		t.Errorf("resolve after rm: %v", err)
	}
	if got, err := s.Resolve(mustParse(t, "mine:v1")); err != nil || got.Size == 0 {
		t.Fatalf("alias after rm of its source: %v", err)
	}
	// rm of the alias: the last name of the snapshot, so everything goes.
	r, err = s.Remove(ctx, mustParse(t, "mine:v1"))
	if err != nil || !r.Alias || len(r.Snapshots) != 1 || r.Blobs != 3 {
		t.Fatalf("removing the alias: %+v, %v", r, err)
	}
	if _, err := os.Stat(filepath.Join(s.HubCache, "models--local--tiny-q4")); !os.IsNotExist(err) {
		t.Errorf("repo folder still there: %v", err)
	}
	if list, _ := s.List(); len(list) != 0 {
		t.Errorf("list after rm = %+v", list)
	}
}

func TestLookupOrder(t *testing.T) {
	s := testStore(t)
	got, err := s.Lookup(mustParse(t, "qwen3:0.6b"))
	if err != nil || got.Repo != "mlx-community/Qwen3-0.6B-4bit" || got.Revision != "main" {
		t.Fatalf("builtin lookup = %+v, %v", got, err)
	}
	if _, err := s.Lookup(mustParse(t, "nosuchmodel")); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "qwen2.5-coder") {
		t.Errorf("unknown bare name: %v", err)
	}
	// A local model of the same name wins over the built-in alias.
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"config.json": "{}", "model.safetensors": "x"})
	if _, err := s.ImportDir(context.Background(), mustParse(t, "qwen3:0.6b"), src); err != nil {
		t.Fatal(err)
	}
	got, err = s.Lookup(mustParse(t, "qwen3:0.6b"))
	if err != nil || got.Repo != "local/qwen3" || got.Revision != "0.6b" {
		t.Fatalf("local lookup = %+v, %v", got, err)
	}
}

func TestImportRejectsNonCheckpoint(t *testing.T) {
	s := testStore(t)
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"config.json": "{}"})
	_, err := s.ImportDir(context.Background(), mustParse(t, "x"), src)
	if err == nil || !strings.Contains(err.Error(), "safetensors") {
		t.Fatalf("import without safetensors: %v", err)
	}
}

// A snapshot laid out by huggingface_hub (no mlxg state at all) is listed, resolved and removable.
func TestForeignCacheEntry(t *testing.T) {
	s := testStore(t)
	repo := filepath.Join(s.HubCache, "models--mlx-community--Other-4bit")
	commit := strings.Repeat("ab", 20)
	writeFiles(t, filepath.Join(repo, "blobs"), map[string]string{"c0ffee": `{"model_type":"llama"}`, strings.Repeat("e", 64): "weights"})
	writeFiles(t, filepath.Join(repo, "refs"), map[string]string{"main": commit})
	snap := filepath.Join(repo, "snapshots", commit)
	os.MkdirAll(snap, 0o755)
	os.Symlink("../../blobs/c0ffee", filepath.Join(snap, "config.json"))
	os.Symlink("../../blobs/"+strings.Repeat("e", 64), filepath.Join(snap, "model.safetensors"))
	// A second snapshot, downloaded by commit only, and a repo that is not a checkpoint.
	other := strings.Repeat("cd", 20)
	os.MkdirAll(filepath.Join(repo, "snapshots", other), 0o755)
	os.Symlink("../../blobs/c0ffee", filepath.Join(repo, "snapshots", other, "config.json"))
	os.Symlink("../../blobs/"+strings.Repeat("e", 64), filepath.Join(repo, "snapshots", other, "model.safetensors"))
	writeFiles(t, filepath.Join(s.HubCache, "models--org--bert", "snapshots", commit), map[string]string{"pytorch_model.bin": "x"})

	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Commit == list[1].Commit {
		t.Fatalf("list = %+v", list)
	}
	for _, m := range list {
		if m.Size != int64(len(`{"model_type":"llama"}`)+len("weights")) || m.Modified.IsZero() {
			t.Errorf("entry %+v", m)
		}
		if m.Name != "mlx-community/Other-4bit" && m.Name != "mlx-community/Other-4bit:"+other {
			t.Errorf("name %q", m.Name)
		}
	}
	m, err := s.Resolve(mustParse(t, "mlx-community/Other-4bit"))
	if err != nil || m.Commit != commit || m.Dir != snap {
		t.Fatalf("resolve: %+v, %v", m, err)
	}
	// rm of main keeps the blobs the other snapshot still links to.
	r, err := s.Remove(context.Background(), mustParse(t, "mlx-community/Other-4bit"))
	if err != nil || len(r.Snapshots) != 1 || r.Blobs != 0 {
		t.Fatalf("rm main: %+v, %v", r, err)
	}
	r, err = s.Remove(context.Background(), mustParse(t, "mlx-community/Other-4bit:"+other))
	if err != nil || r.Blobs != 2 {
		t.Fatalf("rm by commit: %+v, %v", r, err)
	}
	if _, err := os.Stat(repo); !os.IsNotExist(err) {
		t.Errorf("repo folder left: %v", err)
	}
}

func TestEnvironmentPaths(t *testing.T) {
	for _, k := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "MLXG_HOME"} {
		t.Setenv(k, "")
	}
	home, _ := os.UserHomeDir()
	check := func(what, want string) {
		t.Helper()
		got, err := HubCacheDir()
		if err != nil || got != want {
			t.Errorf("%s: HubCacheDir = %q, %v; want %q", what, got, err, want)
		}
	}
	check("default", filepath.Join(home, ".cache", "huggingface", "hub"))
	t.Setenv("XDG_CACHE_HOME", "/x")
	check("XDG_CACHE_HOME", "/x/huggingface/hub")
	t.Setenv("HF_HOME", "/h")
	check("HF_HOME", "/h/hub")
	t.Setenv("HUGGINGFACE_HUB_CACHE", "/old")
	check("HUGGINGFACE_HUB_CACHE", "/old")
	t.Setenv("HF_HUB_CACHE", "/c")
	check("HF_HUB_CACHE", "/c")

	dir := t.TempDir()
	t.Setenv("HF_HOME", dir)
	if tok := Token(); tok != "" {
		t.Errorf("token with nothing set = %q", tok)
	}
	os.WriteFile(filepath.Join(dir, "token"), []byte("hf_saved\n"), 0o600)
	if tok := Token(); tok != "hf_saved" {
		t.Errorf("saved token = %q", tok)
	}
	t.Setenv("HF_TOKEN", "hf_env")
	if tok := Token(); tok != "hf_env" {
		t.Errorf("HF_TOKEN = %q", tok)
	}
	if d, _ := HomeDir(); d != filepath.Join(home, ".mlxg") {
		t.Errorf("HomeDir = %q", d)
	}
}

// A bare name means one model: cp refuses to shadow a created model, and create replaces an alias.
func TestBareNameConflicts(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"config.json": "{}", "model.safetensors": "a"})
	a, err := s.ImportDir(ctx, mustParse(t, "first"), src)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, src, map[string]string{"model.safetensors": "b"})
	b, err := s.ImportDir(ctx, mustParse(t, "second"), src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Copy(mustParse(t, "first"), mustParse(t, "second")); err == nil || !strings.Contains(err.Error(), "mlxg rm second:latest") {
		t.Errorf("cp onto a created model: %v", err)
	}
	if _, err := s.Copy(mustParse(t, "first"), mustParse(t, "third")); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, src, map[string]string{"model.safetensors": "c"})
	c, err := s.ImportDir(ctx, mustParse(t, "third"), src)
	if err != nil {
		t.Fatal(err)
	}
	if c.Commit == a.Commit || c.Commit == b.Commit || c.Repo != "local/third" {
		t.Errorf("create over an alias resolved to %+v", c)
	}
	list, _ := s.List()
	seen := map[string]int{}
	for _, m := range list {
		seen[m.Name]++
	}
	if len(list) != 3 || seen["first:latest"] != 1 || seen["second:latest"] != 1 || seen["third:latest"] != 1 {
		t.Errorf("list = %v", seen)
	}
}
