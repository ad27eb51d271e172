package runner

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/text/constrain"
	"github.com/mlxg/mlxg/text/constrain/constraintest"
	"github.com/mlxg/mlxg/text/template"
)

func mustSchema(t *testing.T, s string) *constrain.Schema {
	t.Helper()
	sch, err := constrain.FromFormat(json.RawMessage(s))
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// TestFormatGreedyQwen3Tiny: greedy decoding on the trained qwen3-tiny under a schema and
// under format "json" gives a complete value that validates, the same on a second run.
func TestFormatGreedyQwen3Tiny(t *testing.T) {
	e, err := Load(testdata.SharedModel(t, "qwen3-tiny"), LoadOptions{Threads: 2, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	schemas := []string{
		`{"type":"object","properties":{"name":{"type":"string","maxLength":24},"age":{"type":"integer","minimum":0,"maximum":120},` +
			`"color":{"enum":["red","green","blue"]},"tags":{"type":"array","items":{"type":"string","maxLength":12},"minItems":1,"maxItems":3}},` +
			`"required":["name","age","color","tags"],"additionalProperties":false}`,
		`"json"`,
		`{"type":"array","items":{"type":"object","properties":{"word":{"type":"string","pattern":"^[a-z]+$","maxLength":10},"ok":{"type":"boolean"}},"required":["word","ok"]},"minItems":2,"maxItems":2}`,
		`{"type":"string","format":"date"}`,
	}
	for _, s := range schemas {
		o := DefaultOptions()
		o.Temperature, o.NumPredict, o.NumCtx = 0, 300, 1024
		req := Request{Messages: []template.Message{{"role": "user", "content": "Describe a person as JSON."}},
			TemplateKwargs: map[string]any{"enable_thinking": false}, Options: o, Format: &Format{Schema: mustSchema(t, s)}}
		res, err := e.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if res.DoneReason != "stop" {
			if s != `"json"` { // any object: the tiny model may loop inside one
				t.Fatalf("%s: done %q after %d tokens: %q", s, res.DoneReason, res.EvalCount, res.Text)
			}
			if err := req.Format.Schema.New(e.ConstrainVocab()).AcceptBytes([]byte(res.Text)); err != nil {
				t.Fatalf("%s: cut output %q is not a valid prefix: %v", s, res.Text, err)
			}
			continue
		}
		raw := []byte(s)
		if s == `"json"` {
			raw = []byte(`{"type":"object"}`)
		}
		if err := constraintest.Validator(t, raw)(res.Text); err != nil {
			t.Fatalf("%s: output %q: %v", s, res.Text, err)
		}
		again, err := e.Generate(context.Background(), req, nil)
		if err != nil || again.Text != res.Text {
			t.Fatalf("%s: a second greedy run gave %q (%v), the first %q", s, again.Text, err, res.Text)
		}
		t.Logf("%s\n  -> %s (%d tokens)", s, res.Text, res.EvalCount)
	}
}

// TestFormatRandomModel: random schemas on a random-weight model with Qwen3's tokenizer,
// sampled at temperature 1: every finished output parses and validates.
func TestFormatRandomModel(t *testing.T) {
	tokDir := testdata.SharedModel(t, "qwen3-tiny")
	dir := filepath.Join(t.TempDir(), "rand")
	cfg := randmodel.Tiny("qwen3", 151936)
	cfg.EOSTokenIDs = []int{151645}
	if err := randmodel.Generate(dir, cfg, randmodel.Options{Seed: 7, TokenizerDir: tokDir}); err != nil {
		t.Fatal(err)
	}
	e, err := Load(dir, LoadOptions{Threads: 2, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	n := 12
	if testing.Short() {
		n = 4
	}
	finished := 0
	for i := range n {
		defs := map[string]any{}
		s := constraintest.RandomSchema(rng, 2, defs)
		if len(defs) > 0 {
			s["$defs"] = defs
		}
		raw, _ := json.Marshal(s)
		sch, err := constrain.Compile(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		o := DefaultOptions()
		o.Temperature, o.TopK, o.TopP, o.NumPredict, o.NumCtx, o.Seed = 1, 0, 1, 400, 1024, i
		res, err := e.Generate(context.Background(), Request{Prompt: "JSON:", Options: o, Format: &Format{Schema: sch}}, nil)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if res.DoneReason != "stop" {
			// Cut by num_predict: the text must still be a valid prefix.
			c := sch.New(e.ConstrainVocab())
			if err := c.AcceptBytes([]byte(res.Text)); err != nil {
				t.Fatalf("%s: cut output %q is not a valid prefix: %v", raw, res.Text, err)
			}
			continue
		}
		finished++
		if err := constraintest.Validator(t, raw)(res.Text); err != nil {
			t.Fatalf("%s: output %q: %v", raw, res.Text, err)
		}
	}
	if finished < n/2 {
		t.Fatalf("only %d of %d generations finished", finished, n)
	}
	t.Logf("%d of %d finished and validated", finished, n)
}

// TestFormatThinkingGate: the thinking block is free, the answer after it constrained.
func TestFormatThinkingGate(t *testing.T) {
	e, err := Load(testdata.SharedModel(t, "qwen3-tiny"), LoadOptions{Threads: 2, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	tok := e.Tokenizer
	sch := mustSchema(t, `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`)
	f := &Format{Schema: sch, ThinkOpen: "<think>", ThinkClose: "</think>"}
	open, _ := tok.TokenID("<think>")
	logits := make([]float32, 151936)
	// At the start: <think> or the answer's first byte, nothing else.
	g := e.newFormatGate(f, nil)
	if err := g.apply(logits); err != nil {
		t.Fatal(err)
	}
	brace := tok.Encode("{", false)[0]
	word := tok.Encode("hello", false)[0]
	if logits[open] != 0 || logits[brace] != 0 || logits[word] > -1e30 {
		t.Fatalf("start: <think> %v, { %v, hello %v", logits[open], logits[brace], logits[word])
	}
	// Inside thinking anything goes, until </think>; then JSON only.
	ids := append([]int32{open}, tok.Encode("Let me think: {not json</think>\n\n", false)...)
	for _, id := range ids {
		clear(logits)
		if err := g.apply(logits); err != nil {
			t.Fatal(err)
		}
		if logits[id] != 0 {
			t.Fatalf("token %q masked in the thinking block", tok.Token(id))
		}
		if err := g.accept(id); err != nil {
			t.Fatal(err)
		}
	}
	clear(logits)
	if err := g.apply(logits); err != nil {
		t.Fatal(err)
	}
	if logits[word] > -1e30 || logits[brace] != 0 {
		t.Fatalf("after </think>: hello %v, { %v", logits[word], logits[brace])
	}
	for _, id := range tok.Encode(`{"a": 1}`, false) {
		if err := g.accept(id); err != nil {
			t.Fatal(err)
		}
	}
	if !g.finished() {
		t.Fatal("the answer is complete but the gate is not finished")
	}
	// A prompt that opened the block: free from the start.
	g = e.newFormatGate(&Format{Schema: sch, ThinkOpen: "<think>", ThinkClose: "</think>", InThinking: true}, nil)
	clear(logits)
	if err := g.apply(logits); err != nil || logits[word] != 0 {
		t.Fatalf("in thinking: hello %v (%v)", logits[word], err)
	}
	if strings.Contains(tok.Token(open), "think") == false {
		t.Fatalf("token %d is %q", open, tok.Token(open))
	}
}

// TestFormatForcedFrame: a Format with a prefix and a suffix (a forced tool call's markers) forces their
// tokens around the constrained value, after a free thinking block in which, with Required, the tokens
// that end generation are masked; the gate finishes after the suffix.
func TestFormatForcedFrame(t *testing.T) {
	e, err := Load(testdata.SharedModel(t, "qwen3-tiny"), LoadOptions{Threads: 2, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	tok := e.Tokenizer
	sch := mustSchema(t, `{"type":"object","properties":{"name":{"const":"f"},"arguments":{"type":"object"}},"required":["name","arguments"]}`)
	f := &Format{Schema: sch, ThinkOpen: "<think>", ThinkClose: "</think>", Prefix: "<tool_call>\n", Suffix: "\n</tool_call>", Required: true}
	eos := e.EOS()[0]
	g := e.newFormatGate(f, map[int32]bool{eos: true})
	open, _ := tok.TokenID("<think>")
	call, _ := tok.TokenID("<tool_call>")
	logits := make([]float32, 151936)
	allowed := func() []int32 {
		t.Helper()
		clear(logits)
		if err := g.apply(logits); err != nil {
			t.Fatal(err)
		}
		var ids []int32
		for i, l := range logits {
			if l == 0 {
				ids = append(ids, int32(i))
			}
		}
		return ids
	}
	accept := func(text string) {
		t.Helper()
		for _, id := range tok.Encode(text, false) {
			if err := g.accept(id); err != nil {
				t.Fatalf("%q: %v", text, err)
			}
		}
	}
	if got := allowed(); len(got) != 2 || !slices.Contains(got, open) || !slices.Contains(got, call) {
		t.Fatalf("start: %d tokens allowed", len(got))
	}
	accept("<think>Maybe")
	if got := allowed(); slices.Contains(got, eos) || len(got) < 1000 {
		t.Fatalf("thinking: EOS allowed %v, %d tokens", slices.Contains(got, eos), len(got))
	}
	accept(" a call.</think>")
	for _, want := range tok.Encode("<tool_call>\n", false) {
		if got := allowed(); len(got) != 1 || got[0] != want {
			t.Fatalf("prefix: %v allowed, want %q", got, tok.Token(want))
		}
		if err := g.accept(want); err != nil {
			t.Fatal(err)
		}
	}
	accept(`{"name": "f", "arguments": {"x": 1}}`)
	if g.finished() {
		t.Fatal("finished before the suffix")
	}
	for _, want := range tok.Encode("\n</tool_call>", false) {
		if got := allowed(); len(got) != 1 || got[0] != want {
			t.Fatalf("suffix: %v allowed, want %q", got, tok.Token(want))
		}
		if err := g.accept(want); err != nil {
			t.Fatal(err)
		}
	}
	if !g.finished() {
		t.Fatal("not finished after the suffix")
	}
}
