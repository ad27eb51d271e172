package runner

import (
	"bytes"
	"sync"

	"github.com/mlxg/mlxg/runner/constrain"
	"github.com/mlxg/mlxg/runner/tokenizer"
)

// Format is a request's structured output: the answer is constrained to a JSON value of
// Schema (runner/constrain), token by token.
type Format struct {
	Schema *constrain.Schema
	// ThinkOpen and ThinkClose delimit a thinking block that is left unconstrained, as
	// Ollama does ("" when the model does not think): the constraint applies after
	// ThinkClose. InThinking says the prompt already opened the block; otherwise the first
	// token may be ThinkOpen's, else the answer starts at once.
	ThinkOpen, ThinkClose string
	InThinking            bool
}

// formatVocab is an engine's vocabulary for constrained decoding, built on first use.
type formatVocab struct {
	once sync.Once
	v    *constrain.Vocab
}

// ConstrainVocab returns the tokenizer's vocabulary for constrained decoding, built once per
// engine (the byte trie of ~150K tokens takes a few hundred milliseconds).
func (e *Engine) ConstrainVocab() *constrain.Vocab {
	if e.format == nil { // an engine not made by Load
		return constrain.NewVocab(e.Tokenizer.VocabSize(), e.Tokenizer.TokenBytes, e.eos)
	}
	e.format.once.Do(func() {
		e.format.v = constrain.NewVocab(e.Tokenizer.VocabSize(), e.Tokenizer.TokenBytes, e.eos)
	})
	return e.format.v
}

type gateState int

const (
	gateThinking gateState = iota // inside the thinking block: free
	gateStart                     // the first token: the answer, or ThinkOpen
	gateOn                        // the answer: constrained
)

// formatGate applies a Format in the generation loop.
type formatGate struct {
	c      *constrain.Constraint
	tok    *tokenizer.Tokenizer
	state  gateState
	openID int32  // ThinkOpen's token id, -1 when it has none
	close  []byte // ThinkClose
	tail   []byte // the end of the thinking text so far, to find ThinkClose
}

func (e *Engine) newFormatGate(f *Format) *formatGate {
	g := &formatGate{c: f.Schema.New(e.ConstrainVocab()), tok: e.Tokenizer, state: gateOn, openID: -1}
	if f.ThinkClose != "" {
		g.close = []byte(f.ThinkClose)
		g.state = gateStart
		if f.InThinking {
			g.state = gateThinking
		}
		if id, ok := e.Tokenizer.TokenID(f.ThinkOpen); ok {
			g.openID = id
		}
	}
	return g
}

// finished reports whether the answer is a complete value that nothing may follow.
func (g *formatGate) finished() bool { return g.state == gateOn && g.c.Finished() }

// apply masks the logits of the tokens that may not come next.
func (g *formatGate) apply(logits []float32) error {
	switch g.state {
	case gateThinking:
		return nil
	case gateStart:
		if g.openID >= 0 && int(g.openID) < len(logits) {
			keep := logits[g.openID]
			err := g.c.Apply(logits)
			logits[g.openID] = keep
			return err
		}
	}
	return g.c.Apply(logits)
}

// accept moves past the token generated.
func (g *formatGate) accept(id int32) error {
	switch g.state {
	case gateStart:
		if id == g.openID {
			g.state = gateThinking
			return nil
		}
		g.state = gateOn
	case gateThinking:
		b, ok := g.tok.TokenBytes(id)
		if !ok { // a special token: its text
			b = []byte(g.tok.Decode([]int32{id}, false))
		}
		g.tail = append(g.tail, b...)
		i := bytes.Index(g.tail, g.close)
		if i < 0 {
			if keep := len(g.close) - 1; len(g.tail) > keep {
				g.tail = append(g.tail[:0], g.tail[len(g.tail)-keep:]...)
			}
			return nil
		}
		g.state = gateOn
		if rest := g.tail[i+len(g.close):]; len(rest) > 0 {
			// The token went on past the tag: its remainder starts the answer.
			return g.c.AcceptBytes(rest)
		}
		return nil
	}
	return g.c.Accept(id)
}
