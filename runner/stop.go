package runner

import (
	"strings"
	"unicode/utf8"
)

// stopFilter finds stop strings in streamed text, even when they span tokens. It
// holds back the tail of the text that could still become a stop string, so a client
// never sees part of one.
type stopFilter struct {
	stops   []string
	pending string
	matched string // the stop string that ended the text, once one has
}

// push adds text and returns what is safe to emit. When a stop string appears, it
// returns the text before it and hit, and everything after is dropped.
func (f *stopFilter) push(text string) (out string, hit bool) {
	if len(f.stops) == 0 {
		return text, false
	}
	f.pending += text
	first := -1
	for _, s := range f.stops {
		if i := strings.Index(f.pending, s); i >= 0 && (first < 0 || i < first) {
			first, f.matched = i, s
		}
	}
	if first >= 0 {
		out, f.pending = f.pending[:first], ""
		return out, true
	}
	hold := 0
	for _, s := range f.stops {
		// The longest proper prefix of s (cut at a character boundary) ending the text.
		for k := min(len(s)-1, len(f.pending)); k > hold; k-- {
			if utf8.RuneStart(s[k]) && strings.HasSuffix(f.pending, s[:k]) {
				hold = k
				break
			}
		}
	}
	cut := len(f.pending) - hold
	out, f.pending = f.pending[:cut], f.pending[cut:]
	return out, false
}

// flush returns the held-back text once generation has ended without a stop string.
func (f *stopFilter) flush() string {
	out := f.pending
	f.pending = ""
	return out
}
