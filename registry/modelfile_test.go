package registry

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

func TestModelfileMerge(t *testing.T) {
	base := &Modelfile{Parameters: map[string]any{"num_ctx": 8192.0, "stop": []any{"a"}}, System: "be brief",
		Messages: []Message{{"user", "hi"}}, License: []string{"MIT"}}
	got := base.Merge(&Modelfile{From: "x", Parameters: map[string]any{"stop": []any{"b"}, "temperature": 0.1}, License: []string{"mine"}})
	want := &Modelfile{From: "x", Parameters: map[string]any{"num_ctx": 8192.0, "stop": []any{"b"}, "temperature": 0.1},
		System: "be brief", Messages: []Message{{"user", "hi"}}, License: []string{"MIT", "mine"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("merge = %+v\nwant %+v", got, want)
	}
	if base.Parameters["stop"].([]any)[0] != "a" || len(base.License) != 1 {
		t.Fatalf("merge changed its base: %+v", base)
	}
	if got := (*Modelfile)(nil).Merge(&Modelfile{System: "s"}); got.System != "s" {
		t.Fatalf("nil base: %+v", got)
	}
}

// Derive pins an alias with its Modelfile; resolve, cp and rm carry or drop the Modelfile with the name.
func TestDerive(t *testing.T) {
	s := testStore(t)
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"config.json": "{}", "model.safetensors": "x"})
	base, err := s.ImportDir(context.Background(), mustParse(t, "base"), src)
	if err != nil {
		t.Fatal(err)
	}
	mf := &Modelfile{From: "base", Parameters: map[string]any{"num_ctx": 2048.0}, System: "sys"}
	d, err := s.Derive(base, mustParse(t, "mine"), mf)
	if err != nil || d.Commit != base.Commit || d.Modelfile == nil || d.Modelfile.System != "sys" || d.Name != "mine:latest" {
		t.Fatalf("derive = %+v, %v", d, err)
	}
	if r, _ := s.Resolve(mustParse(t, "base")); r.Modelfile != nil {
		t.Fatalf("the base got a Modelfile: %+v", r.Modelfile)
	}
	c, err := s.Copy(mustParse(t, "mine"), mustParse(t, "mine2"))
	if err != nil || c.Modelfile == nil || c.Modelfile.Parameters["num_ctx"] != 2048.0 {
		t.Fatalf("cp of a derived model = %+v, %v", c, err)
	}
	// The base itself can take a Modelfile (FROM base, created as base).
	if d, err := s.Derive(base, mustParse(t, "base"), &Modelfile{System: "own"}); err != nil || d.Modelfile.System != "own" || d.Repo != "local/base" {
		t.Fatalf("derive onto itself = %+v, %v", d, err)
	}
	// Another local model's name is refused.
	if _, err := s.ImportDir(context.Background(), mustParse(t, "other"), src); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, src, map[string]string{"model.safetensors": "y"})
	other, err := s.ImportDir(context.Background(), mustParse(t, "other"), src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Derive(base, mustParse(t, "other"), mf); err == nil || !strings.Contains(err.Error(), "remove it first") {
		t.Fatalf("derive over another created model: %v (%s)", err, other.Commit)
	}
	if _, err := s.Derive(base, mustParse(t, "org/repo"), mf); err == nil {
		t.Fatal("derive to a repo name succeeded")
	}
	if _, err := s.Remove(context.Background(), mustParse(t, "mine")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Derive(base, mustParse(t, "mine"), nil); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Resolve(mustParse(t, "mine")); r.Modelfile != nil {
		t.Fatalf("a removed name kept its Modelfile: %+v", r.Modelfile)
	}
	if _, err := s.Remove(context.Background(), mustParse(t, "base")); err != nil {
		t.Fatal(err)
	}
	st, _ := s.readState()
	if _, ok := st.Modelfiles["base:latest"]; ok {
		t.Fatal("rm of a created model kept its Modelfile")
	}
}
