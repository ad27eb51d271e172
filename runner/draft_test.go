package runner

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
)

// A draft model, qwen3-tiny at 4 bits drafting for qwen3-tiny as stored: greedy output is
// plain decoding's, token for token (logprobs and text too), and the draft's tokens are
// mostly kept; sampling runs and keeps drafts too.
func TestDraftModelGreedyQwen3Tiny(t *testing.T) {
	dir := testdata.SharedModel(t, "qwen3-tiny")
	q4 := filepath.Join(t.TempDir(), "q4")
	if _, err := create.Convert(context.Background(), dir, q4, create.Options{Bits: 4, GroupSize: 64}); err != nil {
		t.Fatal(err)
	}
	e, err := Load(dir, LoadOptions{Threads: 2, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	d, err := Load(q4, LoadOptions{Threads: 2, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := e.SetDraft(d); err != nil {
		t.Fatal(err)
	}
	defer e.SetDraft(nil)
	o := Greedy()
	o.NumPredict, o.NumCtx, o.NumDraft = 40, 1024, 4
	res := specPair(t, e, Request{Prompt: "1:1 In the beginning", Options: o, Logprobs: true, TopLogprobs: 2})
	if res.DraftTokens == 0 || res.DraftAccepted*2 < res.DraftTokens {
		t.Errorf("the 4-bit draft kept %d of %d drafted tokens", res.DraftAccepted, res.DraftTokens)
	}
	t.Logf("greedy: %d tokens, %d drafted, %d kept in %d passes", len(res.Tokens), res.DraftTokens, res.DraftAccepted, res.DraftPasses)
	s := DefaultOptions()
	s.NumPredict, s.NumCtx, s.NumDraft, s.Seed = 40, 1024, 4, 3
	sres, err := e.Generate(context.Background(), Request{Prompt: "Question: What is a lighthouse?\nAnswer:", Options: s}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sres.DraftTokens == 0 {
		t.Error("sampling drafted nothing")
	}
	t.Logf("sampling: %d tokens, %d drafted, %d kept in %d passes", len(sres.Tokens), sres.DraftTokens, sres.DraftAccepted, sres.DraftPasses)
}

// A draft model with another tokenizer, or none, or a recurrent layer is refused, saying why.
func TestDraftModelRefused(t *testing.T) {
	e := loadChat(t, nil) // the Qwen3 tokenizer
	llama := filepath.Join(t.TempDir(), "llama")
	cfg := randmodel.Tiny("llama", 32000)
	if err := randmodel.Generate(llama, cfg, randmodel.Options{Seed: 1, TokenizerDir: testdata.Tokenizer(t, "llama2")}); err != nil {
		t.Fatal(err)
	}
	d, err := Load(llama, LoadOptions{Threads: 1, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := e.SetDraft(d); err == nil || !strings.Contains(err.Error(), "same tokenizer") {
		t.Errorf("a Llama 2 draft for a Qwen3 model: %v", err)
	}
	bare, err := LoadModel(llama, LoadOptions{Threads: 1, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if err := e.SetDraft(bare); err == nil || !strings.Contains(err.Error(), "tokenizers") {
		t.Errorf("a draft without a tokenizer: %v", err)
	}
	if e.draft != nil {
		t.Fatal("a refused draft was kept")
	}
}
