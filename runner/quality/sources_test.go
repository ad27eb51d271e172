package quality_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/quality"
	"github.com/mlxg/mlxg/text/tokenizer"
)

// TestLoadSource: every own-source text reads from its package, long enough for the
// scenario's 4K context, starting past its table of contents.
func TestLoadSource(t *testing.T) {
	for _, s := range quality.Sources {
		t.Run(s.Name, func(t *testing.T) {
			testdata.DebianFile(t, s.Package, s.Path)
			text, err := quality.LoadSource(s.Name)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(strings.Fields(text)); n < 5000 {
				t.Errorf("%d words, want enough for 4K tokens", n)
			}
			if s.Start != "" && !strings.HasPrefix(text, s.Start) {
				t.Errorf("starts %q, want %q", text[:min(len(text), 40)], s.Start)
			}
		})
	}
	if _, err := quality.LoadSource("nonesuch"); err == nil || !strings.Contains(err.Error(), "gnu-standards") {
		t.Errorf("an unknown text: %v, want an error listing the texts", err)
	}
}

// TestQwen3TinyOwnText is the restated measure at a small scale: on its own training
// text the model's perplexity is low (the premise of the clear-gap measure), most
// positions have a clear answer, and the default layout keeps those answers.
func TestQwen3TinyOwnText(t *testing.T) {
	dir := testdata.SharedModel(t, "qwen3-tiny")
	s := quality.Sources[0]
	testdata.DebianFile(t, s.Package, s.Path)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	text, err := quality.LoadSource(s.Name)
	if err != nil {
		t.Fatal(err)
	}
	tokens := tok.Encode(text, false)
	if len(tokens) < 4097 {
		t.Fatalf("%q is %d tokens, less than the 4K context the scenario measures", s.Name, len(tokens))
	}
	tokens = tokens[:257]
	m, err := model.Load(dir, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r, err := quality.Compare(context.Background(), layoutSide(t, m, "fp16", "kv-bits=16"), layoutSide(t, m, "default", ""), tokens, quality.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the default layout against fp16 on %q: %v", s.Name, r)
	if r.PPLRef >= 60 {
		t.Errorf("perplexity %.1f on the model's own text, want below 60", r.PPLRef)
	}
	if r.Clear < r.Positions*3/4 || r.Top1Clear() < 0.99 || r.MeanKL > 1e-3 {
		t.Errorf("the default layout against fp16: %v, want at least 99%% of the clear answers kept and KL at most 1e-3", r)
	}
}
