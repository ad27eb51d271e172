package constrain_test

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/text/constrain"
	"github.com/mlxg/mlxg/text/constrain/constraintest"
	"github.com/mlxg/mlxg/text/tokenizer"
)

// qwen3Vocab loads the real Qwen3 tokenizer (151,669 tokens) and its vocabulary.
func qwen3Vocab(t testing.TB) (*tokenizer.Tokenizer, *constrain.Vocab, time.Duration) {
	tok, err := tokenizer.Load(testdata.Tokenizer(t, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	v := constrain.NewVocab(tok.VocabSize(), tok.TokenBytes, tok.EOS())
	return tok, v, time.Since(start)
}

// TestQwen3Targets replays realistic answers, tokenized by the real Qwen3 tokenizer, through
// their schemas: every token of the tokenizer's own split is allowed, the output completes,
// and every mask along the way equals trying each of the 151,669 tokens on the state.
func TestQwen3Targets(t *testing.T) {
	tok, v, build := qwen3Vocab(t)
	t.Logf("vocabulary of %d tokens built in %v", v.Size(), build)
	const logits = 151936 // Qwen3's output size: ids past the tokenizer are always masked
	eos := tok.EOS()[0]
	for _, tg := range constraintest.Targets {
		sch, err := constrain.Compile(json.RawMessage(tg.Schema))
		if err != nil {
			t.Fatalf("%s: %v", tg.Name, err)
		}
		if err := constraintest.Validator(t, []byte(tg.Schema))(tg.Text); err != nil {
			t.Fatalf("%s: the target itself does not validate: %v", tg.Name, err)
		}
		ids := tok.Encode(tg.Text, false)
		c := sch.New(v)
		st := constraintest.Replay(t, c, ids, logits, eos)
		t.Logf("%-9s %3d tokens, %3d trie walks, %v per token (cold cache)", tg.Name, st.Tokens, c.Walks, st.Mask/time.Duration(st.Tokens+1))
		// Brute force at some states along the way.
		c = sch.New(v)
		mask := make([]float32, logits)
		for i, id := range ids {
			if i%11 == 0 {
				clear(mask)
				if err := c.Apply(mask); err != nil {
					t.Fatal(err)
				}
				for other := range int32(logits) {
					want := false
					if b, ok := tok.TokenBytes(other); ok && !isEOS(tok, other) {
						want = c.AllowsBytes(b)
					} else if isEOS(tok, other) {
						want = c.Accepting()
					}
					if got := !math.IsInf(float64(mask[other]), -1); got != want {
						t.Fatalf("%s, token %d: id %d (%q): mask %v, trying it %v", tg.Name, i, other, tok.Token(other), got, want)
					}
				}
			}
			if err := c.Accept(id); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func isEOS(tok *tokenizer.Tokenizer, id int32) bool {
	for _, e := range tok.EOS() {
		if e == id {
			return true
		}
	}
	return false
}

// TestQwen3MaskOverhead prints the per-token cost of constrained decoding at Qwen3's 151,936
// logits: each target replayed through a fresh constraint (a cold mask cache, as in a new
// request), the mask written into the logits and the token accepted.
//
//	go test -run TestQwen3MaskOverhead -v ./text/constrain/
func TestQwen3MaskOverhead(t *testing.T) {
	tok, v, _ := qwen3Vocab(t)
	eos := tok.EOS()[0]
	var total time.Duration
	tokens := 0
	for _, tg := range constraintest.Targets {
		sch, err := constrain.Compile(json.RawMessage(tg.Schema))
		if err != nil {
			t.Fatal(err)
		}
		ids := tok.Encode(tg.Text, false)
		best := time.Duration(math.MaxInt64)
		walks := 0
		for range 3 { // the fastest of 3: the machine is shared
			c := sch.New(v)
			st := constraintest.Replay(t, c, ids, 151936, eos)
			best, walks = min(best, st.Mask), c.Walks
		}
		total += best
		tokens += len(ids) + 1
		t.Logf("%-9s %3d tokens, %3d trie walks: %v per token", tg.Name, len(ids)+1, walks, best/time.Duration(len(ids)+1))
	}
	t.Logf("all targets: %v per token", total/time.Duration(tokens))
}
