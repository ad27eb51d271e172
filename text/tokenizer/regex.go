package tokenizer

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// matcher finds the non-overlapping matches of a Split pattern, leftmost
// first, as Oniguruma's find_iter does in HF's tokenizers.
type matcher interface {
	matches(dst [][2]int, s string) [][2]int
}

// The Split regexes of the supported families. Each has a hand-written scanner
// (scan* below) that returns the same matches as the regex; the equivalence is
// checked against regexp2 by TestScannersMatchRegexp2 and FuzzScanners. Any
// other regex runs on regexp2 (correct, with lookahead, but slower).
const (
	patLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	patDigits = `\p{N}{1,3}`
	patCJK    = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	patDSWord = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

// scanner returns the end of the match starting exactly at i, or -1.
type scanner func(s string, i int) int

var scanners = map[string]scanner{
	patLlama3: func(s string, i int) int { return scanLlama(s, i, 3) },
	patQwen2:  func(s string, i int) int { return scanLlama(s, i, 1) },
	patGPT2:   scanGPT2,
	patDigits: func(s string, i int) int { return runOf(s, i, 3, isN) },
	patCJK:    func(s string, i int) int { return runOf(s, i, -1, isDeepSeekCJK) },
	patDSWord: scanDeepSeek,
}

func newMatcher(re string) (matcher, error) {
	if sc, ok := scanners[re]; ok {
		return scanMatcher(sc), nil
	}
	r, err := regexp2.Compile(re, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("Split regex %q: %w", re, err)
	}
	return regexMatcher{r}, nil
}

type scanMatcher scanner

func (sc scanMatcher) matches(dst [][2]int, s string) [][2]int {
	for i := 0; i < len(s); {
		if e := sc(s, i); e > i {
			dst = append(dst, [2]int{i, e})
			i = e
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return dst
}

type regexMatcher struct{ re *regexp2.Regexp }

func (m regexMatcher) matches(dst [][2]int, s string) [][2]int {
	runes := []rune(s)
	// regexp2 reports rune offsets; off maps them to byte offsets.
	off := make([]int, len(runes)+1)
	for i, r := range runes {
		off[i+1] = off[i] + utf8.RuneLen(r)
	}
	match, _ := m.re.FindRunesMatch(runes)
	for match != nil {
		if match.Length > 0 {
			dst = append(dst, [2]int{off[match.Index], off[match.Index+match.Length]})
		}
		match, _ = m.re.FindNextMatch(match)
	}
	return dst
}

func decode(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// runOf returns the end of the run of at most limit (limit < 0: any number)
// characters satisfying f from i, or -1 when s[i] does not.
func runOf(s string, i, limit int, f func(rune) bool) int {
	j := i
	for n := 0; limit < 0 || n < limit; n++ {
		r, size := decode(s, j)
		if size == 0 || !f(r) {
			break
		}
		j += size
	}
	if j == i {
		return -1
	}
	return j
}

// The character classes of the regexes (\p{L}, \p{N}, \s, ...) as HF's
// regex engine defines them: Go's tables, corrected for the characters of
// newer Unicode versions (unicode_tables.go).
func isL(r rune) bool {
	if r < onigFrom {
		return unicode.IsLetter(r)
	}
	return onigL.fix(r, unicode.IsLetter(r))
}

func isN(r rune) bool {
	if r < onigFrom {
		return unicode.IsNumber(r)
	}
	return onigN.fix(r, unicode.IsNumber(r))
}

func isSpace(r rune) bool {
	if r < onigFrom {
		return unicode.IsSpace(r)
	}
	return onigSpace.fix(r, unicode.IsSpace(r))
}

func isNewline(r rune) bool { return r == '\r' || r == '\n' }

// classFix corrects one of Go's character classes.
type classFix struct{ add, remove *unicode.RangeTable }

// fix returns the engine's answer for r, given Go's.
func (f classFix) fix(r rune, goIs bool) bool {
	if f.add != nil && unicode.Is(f.add, r) {
		return true
	}
	if f.remove != nil && unicode.Is(f.remove, r) {
		return false
	}
	return goIs
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d at i (case-insensitively when
// fold is set, ASCII only: Oniguruma does not fold 'ſ' here, HF's output shows).
func contraction(s string, i int, fold bool) int {
	if i >= len(s) || s[i] != '\'' {
		return -1
	}
	lower := func(k int) byte {
		if k >= len(s) {
			return 0
		}
		c := s[k]
		if fold && c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		return c
	}
	switch c1 := lower(i + 1); c1 {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if lower(i+2) == 'e' {
			return i + 3
		}
	case 'l':
		if lower(i+2) == 'l' {
			return i + 3
		}
	}
	return -1
}

// spaceTail handles the shared tail \s*[\r\n]+|\s+(?!\S)|\s+ at a whitespace
// character i (withNewline: the \s*[\r\n]+ alternative is part of the pattern).
func spaceTail(s string, i int, withNewline bool) int {
	end, lastNL, lastStart, n := i, -1, i, 0
	for {
		r, size := decode(s, end)
		if size == 0 || !isSpace(r) {
			break
		}
		if isNewline(r) {
			lastNL = end + size
		}
		lastStart = end
		end += size
		n++
	}
	if n == 0 {
		return -1
	}
	if withNewline && lastNL > 0 {
		return lastNL // \s*[\r\n]+: up to the last newline of the run
	}
	if end == len(s) || n == 1 {
		return end // \s+(?!\S) at the end of text, or \s+ for a single space
	}
	return lastStart // \s+(?!\S): leave the last space to the next word
}

// scanLlama is patLlama3 (digits 3) and patQwen2 (digits 1).
func scanLlama(s string, i int, digits int) int {
	if e := contraction(s, i, true); e > 0 {
		return e
	}
	r, size := decode(s, i)
	switch {
	case isL(r):
		return runOf(s, i, -1, isL)
	case isN(r):
		return runOf(s, i, digits, isN)
	case isSpace(r):
		if r == ' ' || !isNewline(r) {
			// [^\r\n\p{L}\p{N}]?\p{L}+ and ' ?[^\s\p{L}\p{N}]+' may start with it.
			if e := runOf(s, i+size, -1, isL); e > 0 {
				return e
			}
			if r == ' ' {
				if e := runOf(s, i+size, -1, isOther); e > 0 {
					return runOf2(s, e, isNewline)
				}
			}
		}
		return spaceTail(s, i, true)
	default: // neither letter, number nor space
		if e := runOf(s, i+size, -1, isL); e > 0 {
			return e
		}
		return runOf2(s, runOf(s, i, -1, isOther), isNewline)
	}
}

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isSpace(r) && !isL(r) && !isN(r) }

// runOf2 extends a match ending at j by a run of f (the [\r\n]* suffix).
func runOf2(s string, j int, f func(rune) bool) int {
	if e := runOf(s, j, -1, f); e > 0 {
		return e
	}
	return j
}

// scanGPT2 is patGPT2, the ByteLevel pre-tokenizer's own regex.
func scanGPT2(s string, i int) int {
	if e := contraction(s, i, false); e > 0 {
		return e
	}
	start := i
	if s[i] == ' ' {
		start = i + 1
	}
	r, _ := decode(s, start)
	switch {
	case r >= 0 && isL(r):
		return runOf(s, start, -1, isL)
	case r >= 0 && isN(r):
		return runOf(s, start, -1, isN)
	case r >= 0 && isOther(r):
		return runOf(s, start, -1, isOther)
	}
	return spaceTail(s, i, false)
}

func isDeepSeekCJK(r rune) bool {
	return r >= 0x4e00 && r <= 0x9fa5 || r >= 0x3040 && r <= 0x309f || r >= 0x30a0 && r <= 0x30ff
}

func isASCIIPunct(r rune) bool {
	return r < utf8.RuneSelf && r > ' ' && r < 0x7f && !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
}
func isASCIILetter(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }
func isLM(r rune) bool          { return isL(r) || onigM.fix(r, unicode.IsMark(r)) }
func isPS(r rune) bool          { return onigP.fix(r, unicode.IsPunct(r)) || onigS.fix(r, unicode.IsSymbol(r)) }

// scanDeepSeek is patDSWord, DeepSeek V3's word regex.
func scanDeepSeek(s string, i int) int {
	r, size := decode(s, i)
	if isASCIIPunct(r) {
		if e := runOf(s, i+size, -1, isASCIILetter); e > 0 {
			return e
		}
	}
	if !isNewline(r) && !isL(r) && !isPS(r) {
		if e := runOf(s, i+size, -1, isLM); e > 0 {
			return e
		}
	}
	if isLM(r) {
		return runOf(s, i, -1, isLM)
	}
	start := i
	if r == ' ' {
		start = i + size
	}
	if e := runOf(s, start, -1, isPS); e > 0 {
		return runOf2(s, e, isNewline)
	}
	if isSpace(r) {
		return spaceTail(s, i, true)
	}
	return -1
}
