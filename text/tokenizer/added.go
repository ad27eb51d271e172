package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's "added_tokens".
type addedToken struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// trie finds added tokens in text, leftmost-longest, as HF's Aho-Corasick
// (MatchKind::LeftmostLongest) does: the earliest start wins, then the longest
// token starting there.
type trie struct {
	nodes []trieNode
	first [256]bool // bytes that start some token: the scan skips the rest
}

type trieNode struct {
	next  map[byte]int32
	token int32 // index into the added tokens, -1 when no token ends here
}

func newTrie() *trie { return &trie{nodes: []trieNode{{token: -1}}} }

func (t *trie) insert(s string, token int32) {
	if s == "" {
		return
	}
	t.first[s[0]] = true
	n := int32(0)
	for i := range len(s) {
		c := s[i]
		nx, ok := t.nodes[n].next[c]
		if !ok {
			if t.nodes[n].next == nil {
				t.nodes[n].next = make(map[byte]int32, 1)
			}
			nx = int32(len(t.nodes))
			t.nodes[n].next[c] = nx
			t.nodes = append(t.nodes, trieNode{token: -1})
		}
		n = nx
	}
	t.nodes[n].token = token
}

func (t *trie) empty() bool { return len(t.nodes) == 1 }

// longest returns the token index and length of the longest token that is a
// prefix of s, or -1.
func (t *trie) longest(s string) (int32, int) {
	n, tok, size := int32(0), int32(-1), 0
	for i := range len(s) {
		nx, ok := t.nodes[n].next[s[i]]
		if !ok {
			break
		}
		n = nx
		if t.nodes[n].token >= 0 {
			tok, size = t.nodes[n].token, i+1
		}
	}
	return tok, size
}

// segment is a piece of the input: either text for the model (token < 0) or
// an added token's id.
type segment struct {
	text  string
	token int32
	first bool // the text begins the input
}

// splitAdded splits text on the added tokens of t, honouring single_word,
// lstrip and rstrip as HF's AddedVocabulary::find_matches does, and appends the
// pieces to dst. Empty text pieces are dropped.
func splitAdded(dst []segment, text string, t *trie, tokens []addedToken) []segment {
	if t == nil || t.empty() {
		if text != "" {
			dst = append(dst, segment{text: text, token: -1, first: true})
		}
		return dst
	}
	startOffset := 0
	for i := 0; i < len(text); {
		if !t.first[text[i]] {
			i++
			continue
		}
		k, size := t.longest(text[i:])
		if k < 0 {
			i++
			continue
		}
		tok := &tokens[k]
		start, stop := i, i+size
		if tok.SingleWord && (start > 0 && endsWithWord(text[:start]) || stop < len(text) && startsWithWord(text[stop:])) {
			// Not a whole word: HF discards the match and goes on after it.
			i = stop
			continue
		}
		if tok.LStrip {
			start = max(start-trailingSpace(text[:start]), startOffset)
		}
		if tok.RStrip {
			stop += len(text[stop:]) - len(strings.TrimLeftFunc(text[stop:], unicode.IsSpace))
		}
		if startOffset < start {
			dst = append(dst, segment{text: text[startOffset:start], token: -1, first: startOffset == 0})
		}
		dst = append(dst, segment{token: tok.ID})
		startOffset, i = stop, stop
	}
	if startOffset < len(text) {
		dst = append(dst, segment{text: text[startOffset:], token: -1, first: startOffset == 0})
	}
	return dst
}

func trailingSpace(s string) int { return len(s) - len(strings.TrimRightFunc(s, unicode.IsSpace)) }

// isWordChar is the regex \w of Rust's regex crate, used by single_word.
func isWordChar(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) ||
		unicode.Is(unicode.Mc, r) || unicode.Is(unicode.Me, r) || unicode.Is(unicode.Pc, r) ||
		unicode.Is(unicode.Nl, r) || r == 0x200C || r == 0x200D
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return isWordChar(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isWordChar(r)
}
