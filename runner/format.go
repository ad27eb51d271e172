package runner

import (
	"bytes"
	"fmt"
	"math"
	"sync"

	"github.com/mlxg/mlxg/text/constrain"
	"github.com/mlxg/mlxg/text/tokenizer"
)

// Format is a request's structured output: the answer is constrained to a JSON value of
// Schema (text/constrain), token by token.
type Format struct {
	Schema *constrain.Schema
	// ThinkOpen and ThinkClose delimit a thinking block that is left unconstrained, as
	// Ollama does ("" when the model does not think): the constraint applies after
	// ThinkClose. InThinking says the prompt already opened the block; otherwise the first
	// token may be ThinkOpen's, else the answer starts at once.
	ThinkOpen, ThinkClose string
	InThinking            bool
	// Prefix and Suffix are text the answer is forced to start and end with, around the
	// JSON value (a tool call's markers: "<tool_call>\n" and "\n</tool_call>"), written as
	// the tokenizer encodes them; generation ends after Suffix.
	Prefix, Suffix string
	// Required forbids ending before the answer: inside the thinking block the tokens that
	// end generation are masked (a forced tool call must come).
	Required bool
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
		return constrain.NewVocab(e.Tokenizer.VocabSize(), e.constrainBytes(), e.eos)
	}
	e.format.once.Do(func() {
		e.format.v = constrain.NewVocab(e.Tokenizer.VocabSize(), e.constrainBytes(), e.eos)
	})
	return e.format.v
}

// constrainBytes is the tokenizer's TokenBytes, which leaves special tokens out, with Gemma 4's
// string marker (a special token, where the tokenizer has it) given its text: a constraint in
// Gemma 4's tool-call notation (constrain.Schema.Gemma4) writes strings with it.
func (e *Engine) constrainBytes() func(id int32) ([]byte, bool) {
	quote, ok := e.Tokenizer.TokenID(constrain.Gemma4Quote)
	if !ok || !e.Tokenizer.IsSpecial(quote) {
		return e.Tokenizer.TokenBytes
	}
	return func(id int32) ([]byte, bool) {
		if id == quote {
			return []byte(constrain.Gemma4Quote), true
		}
		return e.Tokenizer.TokenBytes(id)
	}
}

type gateState int

const (
	gateThinking gateState = iota // inside the thinking block: free
	gateStart                     // the first token: the answer, or ThinkOpen
	gatePrefix                    // Prefix's tokens, forced
	gateOn                        // the answer: constrained
	gateSuffix                    // Suffix's tokens, forced
	gateDone                      // the answer and Suffix are complete
)

// formatGate applies a Format in the generation loop.
type formatGate struct {
	c      *constrain.Constraint
	tok    *tokenizer.Tokenizer
	state  gateState
	openID int32  // ThinkOpen's token id, -1 when it has none
	close  []byte // ThinkClose
	tail   []byte // the end of the thinking text so far, to find ThinkClose

	prefix, suffix []int32        // the forced tokens before and after the value
	forced         int            // how many of the current forced run were written
	ends           map[int32]bool // the tokens that end generation, masked while thinking when required
}

// newFormatGate starts f; ends are the tokens that end generation.
func (e *Engine) newFormatGate(f *Format, ends map[int32]bool) *formatGate {
	g := &formatGate{c: f.Schema.New(e.ConstrainVocab()), tok: e.Tokenizer, state: gateOn, openID: -1}
	if f.Prefix != "" {
		g.prefix = e.Tokenizer.Encode(f.Prefix, false)
	}
	if f.Suffix != "" {
		g.suffix = e.Tokenizer.Encode(f.Suffix, false)
	}
	if f.Required {
		g.ends = ends
	}
	g.state = g.answer()
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

// answer is the state the answer starts in: its forced prefix, else the value.
func (g *formatGate) answer() gateState {
	g.forced = 0
	if len(g.prefix) > 0 {
		return gatePrefix
	}
	return gateOn
}

// finished reports whether the answer is complete, with its suffix, and nothing may follow.
func (g *formatGate) finished() bool {
	return g.state == gateDone || g.state == gateOn && len(g.suffix) == 0 && g.c.Finished()
}

// force masks every logit but id's.
func force(logits []float32, id int32) error {
	if id < 0 || int(id) >= len(logits) {
		return constrain.ErrNoToken
	}
	keep := logits[id]
	inf := float32(math.Inf(-1))
	for i := range logits {
		logits[i] = inf
	}
	logits[id] = keep
	return nil
}

// apply masks the logits of the tokens that may not come next.
func (g *formatGate) apply(logits []float32) error {
	switch g.state {
	case gateThinking:
		for id := range g.ends {
			if int(id) < len(logits) {
				logits[id] = float32(math.Inf(-1))
			}
		}
		return nil
	case gateStart:
		if g.openID >= 0 && int(g.openID) < len(logits) {
			keep := logits[g.openID]
			var err error
			if len(g.prefix) > 0 {
				err = force(logits, g.prefix[0])
			} else {
				err = g.c.Apply(logits)
			}
			logits[g.openID] = keep
			return err
		}
		if len(g.prefix) > 0 {
			return force(logits, g.prefix[0])
		}
	case gatePrefix:
		return force(logits, g.prefix[g.forced])
	case gateSuffix:
		return force(logits, g.suffix[g.forced])
	case gateDone:
		return constrain.ErrNoToken
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
		g.state = g.answer()
		return g.accept(id)
	case gatePrefix, gateSuffix:
		run := g.prefix
		if g.state == gateSuffix {
			run = g.suffix
		}
		if id != run[g.forced] {
			return fmt.Errorf("constrained decoding: token %d is not the forced %q", id, g.tok.Decode(run, false))
		}
		if g.forced++; g.forced == len(run) {
			if g.state == gatePrefix {
				g.state = gateOn
			} else {
				g.state = gateDone
			}
		}
		return nil
	case gateDone:
		return fmt.Errorf("constrained decoding: token %d after the end of the answer", id)
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
		g.state = g.answer()
		if rest := g.tail[i+len(g.close):]; len(rest) > 0 && g.state == gateOn {
			// The token went on past the tag: its remainder starts the answer. (Before a
			// forced prefix it is left as it is: it is text the model wrote, not the value.)
			return g.c.AcceptBytes(rest)
		}
		return nil
	}
	if err := g.c.Accept(id); err != nil {
		return err
	}
	if len(g.suffix) > 0 && g.c.Finished() {
		g.state, g.forced = gateSuffix, 0
	}
	return nil
}
