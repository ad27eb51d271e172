package main

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/mlxg/mlxg/text/tokenizer"
)

// commonWords are candidates for prompt words; those the tokenizer encodes as one token
// (with their leading space) are kept, so a prompt of n words is n tokens.
var commonWords = strings.Fields(`the of and to in is was for on that with as by at from his her an
which are be this had not but were have their all one they been has more she he we would there can
when who will no if out so said what up its about into than them only other time new some could these
two may first then do any like my now over such our man me even most made after also did many before
must through back years where much your way well down should because each just those people how too
little state good very make world still own see men work long get here between both life being under
never day same another know while last might us great old year off come since against go came right
used take three house water room city river music south north west east green black white red blue
house tree stone light night game book story field road table paper money voice power order point
place week month group party line king army church horse market ship island garden window school`)

// Prompter makes raw prompts of an exact token count from words that are one token each.
type Prompter struct {
	words []string
	tok   *tokenizer.Tokenizer
}

// NewPrompter loads the tokenizer in dir and keeps the words it encodes as single tokens.
func NewPrompter(dir string) (*Prompter, error) {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, err
	}
	p := &Prompter{tok: tok}
	seen := map[string]bool{}
	for _, w := range commonWords {
		if !seen[w] && len(tok.Encode(" "+w, false)) == 1 {
			p.words = append(p.words, " "+w)
		}
		seen[w] = true
	}
	if len(p.words) < 50 {
		return nil, fmt.Errorf("the tokenizer in %s encodes only %d of the prompt words as one token: is it a BPE tokenizer of a Qwen or Llama model?", dir, len(p.words))
	}
	return p, nil
}

// Prompt is n >= 2 tokens of words drawn by seed, checked with the tokenizer. Its first two
// words spell the seed in base len(words), so seeds below len(words)² give prompts that
// differ within two tokens and no engine can reuse a cached prefix of another's.
func (p *Prompter) Prompt(n int, seed uint64) (string, error) {
	if n < 2 {
		return "", fmt.Errorf("a prompt of %d tokens is too short: want at least 2", n)
	}
	r := rand.New(rand.NewPCG(seed, 0x6d6c7867))
	l := uint64(len(p.words))
	var b strings.Builder
	b.WriteString(p.words[seed%l])
	b.WriteString(p.words[seed/l%l])
	for range n - 2 {
		b.WriteString(p.words[r.IntN(len(p.words))])
	}
	s := b.String()
	if got := len(p.tok.Encode(s, false)); got != n {
		return "", fmt.Errorf("a %d-word prompt encodes to %d tokens", n, got)
	}
	return s, nil
}
