package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// pieces that exercise every branch of the scanners: letters and numbers of
// several scripts, marks, every kind of space, newlines, punctuation and
// symbols, apostrophes and contractions in both cases, CJK and kana.
var scannerAlphabet = []string{
	"a", "Z", "é", "ß", "ſ", "K", "İ", "Ω", "ж", "中", "語", "ひ", "カ", "ー", "한", "ع", "ह", "ि", "\u0301", "\u20dd",
	"1", "9", "٣", "४", "½", "Ⅻ", "²",
	" ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2003", "\u0085", "\u2028", "\u000b", "\u000c", "\u200b",
	"'", "'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'x", "’",
	".", ",", "!", "?", "-", "_", "(", ")", "[", "\\", "`", "~", "$", "+", "<", "=", "|", "…", "«", "€", "©", "😀", "\u200d", "\ufe0f",
	"\x00", "\x1b", "\x7f",
}

func randomScannerText(rng *rand.Rand) string {
	var b strings.Builder
	for range rng.IntN(24) {
		b.WriteString(scannerAlphabet[rng.IntN(len(scannerAlphabet))])
	}
	return b.String()
}

// references holds each scanner's regex compiled by regexp2.
var references = sync.OnceValue(func() map[string]regexMatcher {
	m := make(map[string]regexMatcher)
	for pat := range scanners {
		m[pat] = regexMatcher{regexp2.MustCompile(pat, regexp2.None)}
	}
	return m
})

// newerUnicode reports characters whose class Go's Unicode tables (which
// regexp2 uses) do not know yet; the scanners follow HF's engine there, which
// the conformance tests check.
func newerUnicode(s string) bool {
	for _, r := range s {
		for _, f := range []classFix{onigL, onigN, onigP, onigS, onigM, onigSpace} {
			if f.fix(r, false) || !f.fix(r, true) {
				return true
			}
		}
	}
	return false
}

func checkScanners(t *testing.T, s string) {
	t.Helper()
	if newerUnicode(s) {
		return
	}
	for pat, sc := range scanners {
		want := references()[pat].matches(nil, s)
		if got := scanMatcher(sc).matches(nil, s); !slices.Equal(got, want) {
			t.Fatalf("pattern %q on %q:\n scanner %v\n regexp2 %v", pat, s, got, want)
		}
	}
}

// TestScannersMatchRegexp2 checks each hand-written scanner against regexp2
// running its regex, on the corpus and on random text.
func TestScannersMatchRegexp2(t *testing.T) {
	for _, s := range corpus(t) {
		checkScanners(t, s)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		checkScanners(t, randomScannerText(rng))
	}
}

// TestFamiliesUseScanners guards the fast path: the real tokenizers' regexes
// must be the ones the scanners implement, character for character.
func TestFamiliesUseScanners(t *testing.T) {
	for _, fam := range []string{"qwen3", "llama3_1", "deepseek_v3"} {
		tok := family(t, fam)
		var check func(p preTokenizer)
		check = func(p preTokenizer) {
			switch p := p.(type) {
			case preSequence:
				for _, q := range p {
					check(q)
				}
			case *splitPre:
				if _, ok := p.m.(scanMatcher); !ok {
					t.Errorf("%s: a Split regex runs on regexp2, not a scanner", fam)
				}
			}
		}
		check(tok.pre)
	}
}

func FuzzScanners(f *testing.F) {
	for _, s := range []string{"Hello world's 123", "  \n\n x", "a'S'll", "中文カタ 😀\u200d", "\u3000\u00a0x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // Encode replaces invalid UTF-8 before any scanner sees it
		}
		checkScanners(t, s)
	})
}
