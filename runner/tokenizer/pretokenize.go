package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// preTokenizer splits a normalized piece of text into words for the model.
type preTokenizer interface {
	split(dst []string, s string) []string
}

type preSequence []preTokenizer

func (q preSequence) split(dst []string, s string) []string {
	cur := []string{s}
	var next []string
	for _, p := range q {
		next = next[:0]
		for _, piece := range cur {
			next = p.split(next, piece)
		}
		cur, next = next, cur
	}
	return append(dst, cur...)
}

// byteLevel is the ByteLevel pre-tokenizer. When it is the last step (lazy),
// its words keep their raw bytes and the model maps them (see bpe.encode);
// otherwise it maps them to GPT-2's byte characters itself.
type byteLevel struct {
	addPrefixSpace bool
	re             matcher // nil unless use_regex
	lazy           bool
}

func (b *byteLevel) split(dst []string, s string) []string {
	if b.addPrefixSpace && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	start := len(dst)
	if b.re != nil {
		dst = splitBy(dst, s, b.re, isolated, false)
	} else if s != "" {
		dst = append(dst, s)
	}
	if !b.lazy {
		for i := start; i < len(dst); i++ {
			dst[i] = byteLevelString(dst[i])
		}
	}
	return dst
}

type behavior int

const (
	removed behavior = iota
	isolated
	mergedWithPrevious
	mergedWithNext
	contiguous
)

var behaviors = map[string]behavior{"Removed": removed, "Isolated": isolated,
	"MergedWithPrevious": mergedWithPrevious, "MergedWithNext": mergedWithNext, "Contiguous": contiguous}

type splitPre struct {
	m        matcher
	behavior behavior
	invert   bool
}

func (p *splitPre) split(dst []string, s string) []string {
	return splitBy(dst, s, p.m, p.behavior, p.invert)
}

// splitBy splits s at the matches of m with HF's SplitDelimiterBehavior, and
// appends the non-empty pieces.
func splitBy(dst []string, s string, m matcher, b behavior, invert bool) []string {
	if s == "" {
		return dst
	}
	type span struct {
		start, end int
		match      bool
	}
	var spans []span
	prev := 0
	for _, mt := range m.matches(nil, s) {
		if prev != mt[0] {
			spans = append(spans, span{prev, mt[0], invert})
		}
		spans = append(spans, span{mt[0], mt[1], !invert})
		prev = mt[1]
	}
	if prev != len(s) {
		spans = append(spans, span{prev, len(s), invert})
	}
	var out []span
	switch b {
	case isolated:
		out = spans
	case removed:
		for _, sp := range spans {
			if !sp.match {
				out = append(out, sp)
			}
		}
	case contiguous, mergedWithPrevious:
		prevMatch := false
		for _, sp := range spans {
			join := sp.match == prevMatch
			if b == mergedWithPrevious {
				join = sp.match && !prevMatch
			}
			if join && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	case mergedWithNext:
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = sp.start
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	for _, sp := range out {
		if sp.end > sp.start {
			dst = append(dst, s[sp.start:sp.end])
		}
	}
	return dst
}

// literal matches a {"String": ...} Split pattern.
type literal string

func (l literal) matches(dst [][2]int, s string) [][2]int {
	if l == "" {
		return dst
	}
	for i := 0; ; {
		k := strings.Index(s[i:], string(l))
		if k < 0 {
			return dst
		}
		dst = append(dst, [2]int{i + k, i + k + len(l)})
		i += k + len(l)
	}
}

// parsePreTokenizer reads a pre_tokenizer. last says it is the final step of
// the chain, where a ByteLevel step may leave the byte mapping to the model;
// *lazy is set when it does.
func parsePreTokenizer(raw json.RawMessage, last bool, lazy *bool) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var head struct {
		Type           string            `json:"type"`
		PreTokenizers  []json.RawMessage `json:"pretokenizers"`
		Pattern        pattern           `json:"pattern"`
		Behavior       string            `json:"behavior"`
		Invert         bool              `json:"invert"`
		AddPrefixSpace bool              `json:"add_prefix_space"`
		UseRegex       *bool             `json:"use_regex"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch head.Type {
	case "Sequence":
		var seq preSequence
		for i, r := range head.PreTokenizers {
			p, err := parsePreTokenizer(r, last && i == len(head.PreTokenizers)-1, lazy)
			if err != nil {
				return nil, err
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		if len(seq) == 1 {
			return seq[0], nil
		}
		return seq, nil
	case "ByteLevel":
		b := &byteLevel{addPrefixSpace: head.AddPrefixSpace, lazy: last}
		if head.UseRegex == nil || *head.UseRegex {
			b.re, _ = newMatcher(patGPT2)
		}
		if last {
			*lazy = true
		}
		return b, nil
	case "Split":
		bh, ok := behaviors[head.Behavior]
		if !ok {
			return nil, fmt.Errorf("pre_tokenizer Split: unsupported behavior %q", head.Behavior)
		}
		var m matcher
		switch {
		case head.Pattern.String != nil:
			m = literal(*head.Pattern.String)
		case head.Pattern.Regex != nil:
			var err error
			if m, err = newMatcher(*head.Pattern.Regex); err != nil {
				return nil, fmt.Errorf("pre_tokenizer %w", err)
			}
		default:
			return nil, fmt.Errorf("pre_tokenizer Split: no pattern in %s", raw)
		}
		return &splitPre{m: m, behavior: bh, invert: head.Invert}, nil
	}
	return nil, fmt.Errorf("unsupported pre_tokenizer type %q (supported: ByteLevel, Split, Sequence)", head.Type)
}
