package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// preTokenizer splits a normalized piece of text into words for the model.
type preTokenizer interface {
	split(dst []piece, p piece) []piece
}

// piece is a piece of text; first says it begins the input (Metaspace's
// prepend_scheme "first" needs that).
type piece struct {
	text  string
	first bool
}

type preSequence []preTokenizer

func (q preSequence) split(dst []piece, p piece) []piece {
	cur := []piece{p}
	var next []piece
	for _, pt := range q {
		next = next[:0]
		for _, pc := range cur {
			next = pt.split(next, pc)
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

func (b *byteLevel) split(dst []piece, p piece) []piece {
	if b.addPrefixSpace && !strings.HasPrefix(p.text, " ") {
		p.text = " " + p.text
	}
	start := len(dst)
	if b.re != nil {
		dst = splitBy(dst, p, b.re, isolated, false)
	} else if p.text != "" {
		dst = append(dst, p)
	}
	if !b.lazy {
		for i := start; i < len(dst); i++ {
			dst[i].text = byteLevelString(dst[i].text)
		}
	}
	return dst
}

// metaspace is the Metaspace pre-tokenizer: spaces become the replacement
// character ("▁"), which is also prepended (always, to the first piece of
// the input only, or never), then the text is split before each one.
type metaspace struct {
	replacement string
	prepend     string // "always", "first" or "never"
	splitWords  bool
}

func (m *metaspace) split(dst []piece, p piece) []piece {
	p.text = strings.ReplaceAll(p.text, " ", m.replacement)
	if (m.prepend == "always" || m.prepend == "first" && p.first) && !strings.HasPrefix(p.text, m.replacement) {
		p.text = m.replacement + p.text
	}
	if m.splitWords {
		return splitBy(dst, p, literal(m.replacement), mergedWithNext, false)
	}
	if p.text != "" {
		dst = append(dst, p)
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

func (sp *splitPre) split(dst []piece, p piece) []piece {
	return splitBy(dst, p, sp.m, sp.behavior, sp.invert)
}

// splitBy splits p at the matches of m with HF's SplitDelimiterBehavior, and
// appends the non-empty pieces.
func splitBy(dst []piece, p piece, m matcher, b behavior, invert bool) []piece {
	s := p.text
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
			dst = append(dst, piece{text: s[sp.start:sp.end], first: p.first && sp.start == 0})
		}
	}
	return dst
}

// charMatcher matches every character for which it is true, one by one.
type charMatcher func(rune) bool

func (f charMatcher) matches(dst [][2]int, s string) [][2]int {
	for i, r := range s {
		if f(r) {
			dst = append(dst, [2]int{i, i + utf8.RuneLen(r)})
		}
	}
	return dst
}

// isPunctuation is HF's is_punc: ASCII punctuation or Unicode category P.
func isPunctuation(r rune) bool { return isASCIIPunct(r) || unicode.IsPunct(r) }

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
	case "Metaspace":
		return parseMetaspace(raw)
	case "Digits":
		var j struct {
			IndividualDigits bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Digits: %w", err)
		}
		// Rust's char::is_numeric, on the same Unicode version as the regexes' \p{N}.
		if j.IndividualDigits {
			return &splitPre{m: charMatcher(isN), behavior: isolated}, nil
		}
		return &splitPre{m: charMatcher(isN), behavior: contiguous}, nil
	case "Punctuation":
		bh := isolated
		if head.Behavior != "" {
			var ok bool
			if bh, ok = behaviors[head.Behavior]; !ok {
				return nil, fmt.Errorf("pre_tokenizer Punctuation: unsupported behavior %q", head.Behavior)
			}
		}
		return &splitPre{m: charMatcher(isPunctuation), behavior: bh}, nil
	}
	return nil, fmt.Errorf("unsupported pre_tokenizer type %q (supported: ByteLevel, Digits, Metaspace, Punctuation, Split, Sequence)", head.Type)
}

// parseMetaspace reads a Metaspace pre-tokenizer; older files say
// add_prefix_space instead of prepend_scheme.
func parseMetaspace(raw json.RawMessage) (*metaspace, error) {
	var j struct {
		Replacement    string `json:"replacement"`
		PrependScheme  string `json:"prepend_scheme"`
		AddPrefixSpace *bool  `json:"add_prefix_space"`
		Split          *bool  `json:"split"`
	}
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("Metaspace: %w", err)
	}
	if utf8.RuneCountInString(j.Replacement) != 1 {
		return nil, fmt.Errorf("Metaspace: replacement %q must be one character", j.Replacement)
	}
	m := &metaspace{replacement: j.Replacement, prepend: j.PrependScheme, splitWords: j.Split == nil || *j.Split}
	switch {
	case j.AddPrefixSpace != nil && !*j.AddPrefixSpace:
		m.prepend = "never"
	case m.prepend == "":
		m.prepend = "always"
	case m.prepend != "always" && m.prepend != "first" && m.prepend != "never":
		return nil, fmt.Errorf("Metaspace: unknown prepend_scheme %q", m.prepend)
	}
	return m, nil
}
