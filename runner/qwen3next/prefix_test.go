package qwen3next_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// TestPrefixCacheResume: the KV policy's caches for a hybrid model, filled with the
// model's recurrent states and handed to the prefix cache as model.Seq, save the states
// with the prompt's blocks; a later, longer prompt restores the attention blocks and the
// states at the first prompt's end and computes only the rest, with the logits of a cold
// run. A prompt that diverges inside the cached prefix resumes only from a position
// with a state (here none: it is recomputed from the start).
func TestPrefixCacheResume(t *testing.T) {
	m := load(t, 0)
	raw, err := os.ReadFile(filepath.Join(m.Dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	shape, err := kvstore.ShapeFromConfig(raw, m.WeightBytes())
	if err != nil {
		t.Fatal(err)
	}
	layout, err := kvstore.NewLayout(shape, kvstore.SpecF16, 0, kvstore.SpecF16)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	begin := func() ([]kvstore.Layer, *kvstore.Session) {
		caches, err := kvstore.NewCaches(shape, layout)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.FillCaches(caches); err != nil {
			t.Fatal(err)
		}
		seq := model.Seq(caches)
		key, err := kvstore.NewModelKey("qwen3next-test", seq)
		if err != nil {
			t.Fatal(err)
		}
		return caches, pc.Begin(key, seq)
	}
	long := modeltest.Tokens(3, 300) // a full block and a partial one
	first := long[:270]

	caches, s := begin()
	if n := s.Restore(first); n != 0 {
		t.Fatalf("a cold cache restored %d positions", n)
	}
	modeltest.Forward(t, m, caches, first, 100)
	s.Save(first)
	s.End()

	caches, s = begin()
	n := s.Restore(long)
	if n != len(first) {
		t.Fatalf("restored %d positions, want %d (the first prompt, where its states were saved)", n, len(first))
	}
	got := modeltest.Forward(t, m, caches, long[n:], 30)
	s.End()
	cold, _ := m.NewCaches(false)
	want := modeltest.Forward(t, m, cold, long, 300)
	want = want[len(want)-len(got):]
	if r := modeltest.MaxRel(got, want); r > 1e-5 {
		t.Errorf("resumed from the prefix cache: logits differ from a cold run by %.3g", r)
	}

	other := append(append([]int32{}, first[:200]...), modeltest.Tokens(3, 40)...)
	_, s = begin()
	if n := s.Restore(other); n != 0 {
		t.Errorf("a prompt diverging at 200 restored %d positions, but the states exist only at 270", n)
	}
	s.End()
}
