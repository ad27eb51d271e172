package tokenizer

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/mlxg/mlxg/internal/testdata"
)

// TestConfig checks what Load reads from tokenizer_config.json.
func TestConfig(t *testing.T) {
	for _, c := range []struct {
		fam     string
		bos     int32 // -1: none
		eos     []int32
		special string // a token that must be special
		plain   string // an added token that must not be
	}{
		{"qwen3", -1, []int32{151645}, "<|im_start|>", "<think>"},
		{"llama3_1", 128000, []int32{128009}, "<|eot_id|>", ""},
		{"deepseek_v3", 0, []int32{1}, "<｜begin▁of▁sentence｜>", "<｜User｜>"},
		{"llama2", 1, []int32{2}, "</s>", ""},
		{"gemma3", 2, []int32{106}, "<start_of_turn>", "<unused0>"},
	} {
		tok := family(t, c.fam)
		bos, ok := tok.BOS()
		if c.bos < 0 && ok || c.bos >= 0 && (!ok || bos != c.bos) {
			t.Errorf("%s: BOS() = %d, %v; want %d", c.fam, bos, ok, c.bos)
		}
		if got := tok.EOS(); !slices.Equal(got, c.eos) {
			t.Errorf("%s: EOS() = %v, want %v", c.fam, got, c.eos)
		}
		id, ok := tok.TokenID(c.special)
		if !ok || !tok.IsSpecial(id) || tok.Token(id) != c.special {
			t.Errorf("%s: %q: id %d (%v), special %v, Token %q", c.fam, c.special, id, ok, tok.IsSpecial(id), tok.Token(id))
		}
		if c.plain != "" {
			if id, ok := tok.TokenID(c.plain); !ok || tok.IsSpecial(id) {
				t.Errorf("%s: %q: id %d (%v), special %v; want a non-special added token", c.fam, c.plain, id, ok, tok.IsSpecial(id))
			}
		}
		if _, ok := tok.TokenID("no such token, surely"); ok {
			t.Errorf("%s: TokenID of an unknown token succeeded", c.fam)
		}
		if tok.Token(int32(tok.VocabSize())) != "" || tok.Token(-1) != "" {
			t.Errorf("%s: Token out of range is not empty", c.fam)
		}
		if tok.Token(int32(tok.VocabSize()-1)) == "" {
			t.Errorf("%s: VocabSize %d: the last id has no token", c.fam, tok.VocabSize())
		}
	}
	if got := family(t, "gemma3").VocabSize(); got != 262145 {
		t.Errorf("gemma3 VocabSize = %d, want 262145 (262144 + <image_soft_token>)", got)
	}
}

// TestSharedModel checks the tokenizer of the trained qwen3-tiny checkpoint:
// same ids as the npm Qwen3 tokenizer, EOS from generation_config.json too.
func TestSharedModel(t *testing.T) {
	tok, err := Load(testdata.SharedModel(t, "qwen3-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	ref := family(t, "qwen3")
	for _, text := range corpus(t) {
		if got, want := tok.Encode(text, false), ref.Encode(text, false); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v", text, got, want)
		}
	}
	if got := tok.EOS(); !slices.Equal(got, []int32{151645, 151643}) {
		t.Errorf("EOS() = %v, want [151645 151643] (tokenizer_config, then generation_config)", got)
	}
	chat := "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
	want := []int32{151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198}
	if got := tok.Encode(chat, false); !slices.Equal(got, want) {
		t.Errorf("Encode(%q) = %v, want %v", chat, got, want)
	}
}

// streamAll feeds ids one by one and returns the chunks.
func streamAll(tok *Tokenizer, ids []int32, skip bool) []string {
	d := tok.NewStreamDecoder(skip)
	var chunks []string
	for _, id := range ids {
		chunks = append(chunks, d.Add(id))
	}
	return append(chunks, d.Flush())
}

func checkStream(t *testing.T, tok *Tokenizer, ids []int32, skip bool) {
	t.Helper()
	chunks := streamAll(tok, ids, skip)
	for i, c := range chunks {
		if !utf8.ValidString(c) {
			t.Fatalf("chunk %d of %v is not valid UTF-8: %q", i, ids, c)
		}
	}
	if got, want := strings.Join(chunks, ""), tok.Decode(ids, skip); got != want {
		t.Errorf("stream of %v (skip %v) = %q, Decode = %q; chunks %q", ids, skip, got, want, chunks)
	}
}

// TestStreamDecoder checks that streaming adds up to Decode for the corpus and
// the random id sequences of the fixtures, and never splits a character.
func TestStreamDecoder(t *testing.T) {
	texts := corpus(t)
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			tok := family(t, fam)
			for _, text := range texts {
				ids := tok.Encode(text, true)
				checkStream(t, tok, ids, false)
				checkStream(t, tok, ids, true)
			}
			var ref fixture
			readJSON(t, "ref_"+fam+".json", &ref)
			for _, d := range ref.Decodes {
				for _, skip := range []bool{false, true} {
					if !pathologicalByteRun(tok, d.IDs, skip) {
						checkStream(t, tok, d.IDs, skip)
					}
				}
			}
		})
	}
}

// pathologicalByteRun reports a run of byte-fallback tokens with a valid
// character followed by bytes that make the run invalid: HF decodes the whole
// run as U+FFFD per byte, which a stream that already emitted the character
// cannot follow. Ids Decode drops (unknown, or special when skipped) do not
// end a run.
func pathologicalByteRun(tok *Tokenizer, ids []int32, skip bool) bool {
	var run []byte
	check := func() bool {
		for k := 1; k < len(run); k++ {
			if utf8.Valid(run[:k]) && !utf8.Valid(run) {
				return true
			}
		}
		return false
	}
	for _, id := range ids {
		tokText, ok := tok.token(id)
		if !ok || skip && tok.special[tokText] {
			continue
		}
		if b, ok := byteTokenValue(tokText); ok {
			run = append(run, b)
			continue
		}
		if check() {
			return true
		}
		run = run[:0]
	}
	return check()
}

// TestStreamHoldsPartialCharacters feeds a character that spans tokens and
// checks that nothing is emitted until it is complete.
func TestStreamHoldsPartialCharacters(t *testing.T) {
	for _, fam := range families {
		tok := family(t, fam)
		var ids []int32
		// "€" as byte pieces: byte-level tokens or <0xXX> byte tokens.
		for _, b := range []byte("€") {
			id, ok := tok.TokenID(string(byteToRune[b]))
			if tok.model.byteFallback {
				id, ok = tok.model.byteTokens[b], tok.model.byteTokens[b] >= 0
			}
			if !ok {
				t.Fatalf("%s: no token for byte %#x", fam, b)
			}
			ids = append(ids, id)
		}
		d := tok.NewStreamDecoder(false)
		lead := tok.Encode("Price:", false)
		var got string
		for _, id := range lead {
			got += d.Add(id)
		}
		if got != "Price:" {
			t.Errorf("%s: streamed %q, want %q", fam, got, "Price:")
		}
		for i, id := range ids[:len(ids)-1] {
			if s := d.Add(id); s != "" {
				t.Errorf("%s: byte %d of €: emitted %q", fam, i, s)
			}
		}
		if s := d.Add(ids[len(ids)-1]); s != "€" {
			t.Errorf("%s: last byte of €: emitted %q, want €", fam, s)
		}
		// An unfinished character at the end comes out of Flush as U+FFFD.
		d.Add(ids[0])
		if s := d.Flush(); s != "\uFFFD" {
			t.Errorf("%s: Flush of a partial character = %q, want U+FFFD", fam, s)
		}
	}
}

func TestLossy(t *testing.T) {
	for in, want := range map[string]string{
		"abc":               "abc",
		"a\xffb":            "a\uFFFDb",
		"\xff\xfe":          "\uFFFD\uFFFD",
		"\xe2\x82":          "\uFFFD", // one maximal subpart
		"\xe2\x82x":         "\uFFFDx",
		"\xe2\x82\xac":      "€",
		"\xf0\x9f\x98":      "\uFFFD",
		"\xf0\x9f\x98\x80!": "😀!",
		"\xed\xa0\x80":      "\uFFFD\uFFFD\uFFFD", // surrogates: each byte
		"\xc0\xaf":          "\uFFFD\uFFFD",
		"\xf4\x90\x80\x80":  "\uFFFD\uFFFD\uFFFD\uFFFD",
		"\xe0\x80\x80":      "\uFFFD\uFFFD\uFFFD",
		"\xe0\xa0":          "\uFFFD",
	} {
		if got := lossy([]byte(in)); got != want {
			t.Errorf("lossy(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestInvalidUTF8Input: invalid input bytes are read as U+FFFD, never a panic.
func TestInvalidUTF8Input(t *testing.T) {
	tok := family(t, "qwen3")
	if got, want := tok.Encode("a\xffb", false), tok.Encode("a\uFFFDb", false); !slices.Equal(got, want) {
		t.Errorf("Encode(a\\xffb) = %v, want %v", got, want)
	}
}

// TestLoadErrors: bad files give errors naming the file and the problem.
func TestLoadErrors(t *testing.T) {
	base := `{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, %s}`
	for _, c := range []struct{ json, want string }{
		{`{"model": {"type": "WordPiece", "vocab": {}}}`, `unsupported model type "WordPiece"`},
		{`{"model": {"type": "Unigram", "vocab": []}}`, `unsupported model type "Unigram"`},
		{strings.Replace(base, "%s", `"normalizer": {"type": "BertNormalizer"}`, 1), `unsupported normalizer type "BertNormalizer"`},
		{strings.Replace(base, "%s", `"pre_tokenizer": {"type": "Whitespace"}`, 1), `unsupported pre_tokenizer type "Whitespace"`},
		{strings.Replace(base, "%s", `"post_processor": {"type": "RobertaProcessing"}`, 1), `unsupported post_processor type "RobertaProcessing"`},
		{strings.Replace(base, "%s", `"decoder": {"type": "WordPiece"}`, 1), `unsupported decoder type "WordPiece"`},
		{strings.Replace(base, "%s", `"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(?<"}, "behavior": "Isolated"}`, 1), `Split regex "(?<"`},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}`, `model.merges[0]: token "b" is not in the vocab`},
		{`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}}`, `merged token "ab" is not in the vocab`},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}}`, `model.merges[0] "a"`},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "dropout": 0.1}}`, `dropout`},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "unk_token": "<unk>"}}`, `unk_token "<unk>" is not in the vocab`},
		{`{"model": `, `not valid tokenizer JSON`},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(c.json), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(dir)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "tokenizer.json") {
			t.Errorf("Load(%s): error %v, want one naming tokenizer.json and containing %q", c.json, err, c.want)
		}
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("Load of an empty dir: %v", err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}`), 0o644)
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"eos_token": "</s>"}`), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `eos_token "</s>" is not a token`) {
		t.Errorf("Load with an unknown eos_token: %v", err)
	}
}

// TestBPEMergeOrder checks the merge loop against a plain reference on
// random words over a small random vocab: repeatedly merge the pair of lowest
// rank, leftmost first.
func TestBPEMergeOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		vocab := map[string]int32{"a": 0, "b": 1, "c": 2}
		var merges [][2]string
		toks := []string{"a", "b", "c"}
		for range 12 {
			l, r := toks[rng.IntN(len(toks))], toks[rng.IntN(len(toks))]
			if _, ok := vocab[l+r]; ok || len(l+r) > 6 {
				continue
			}
			vocab[l+r] = int32(len(vocab))
			toks = append(toks, l+r)
			merges = append(merges, [2]string{l, r})
		}
		m, err := newBPE(vocab, merges, nil, false, false, false, "", "")
		if err != nil {
			t.Fatal(err)
		}
		word := make([]byte, 1+rng.IntN(30))
		for i := range word {
			word[i] = "abc"[rng.IntN(3)]
		}
		got := m.encode(nil, string(word), false)
		want := referenceBPE(vocab, merges, string(word))
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: word %q merges %v: got %v, want %v", trial, word, merges, got, want)
		}
	}
}

func referenceBPE(vocab map[string]int32, merges [][2]string, word string) []int32 {
	parts := strings.Split(word, "")
	for {
		best, at := -1, -1
		for i := 0; i+1 < len(parts); i++ {
			for r, mg := range merges {
				if mg[0] == parts[i] && mg[1] == parts[i+1] && (best < 0 || r < best) {
					best, at = r, i
				}
			}
		}
		if at < 0 {
			break
		}
		parts = append(parts[:at], append([]string{parts[at] + parts[at+1]}, parts[at+2:]...)...)
	}
	ids := make([]int32, len(parts))
	for i, p := range parts {
		ids[i] = vocab[p]
	}
	return ids
}

// TestConcurrentUse encodes and decodes from several goroutines at once (the
// word cache is shared) and checks the results against sequential ones.
func TestConcurrentUse(t *testing.T) {
	tok := family(t, "qwen3")
	texts := corpus(t)
	want := make([][]int32, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s, false)
	}
	tok.model.cacheMu.Lock()
	tok.model.cache = make(map[string][]int32)
	tok.model.cacheMu.Unlock()
	errs := make(chan string, 4*len(texts))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := range texts {
				i := (k + g*7) % len(texts)
				if got := tok.Encode(texts[i], false); !slices.Equal(got, want[i]) {
					errs <- texts[i]
				}
				tok.Decode(want[i], true)
			}
		})
	}
	wg.Wait()
	close(errs)
	for s := range errs {
		t.Errorf("concurrent Encode(%q) differs from sequential", s)
	}
}

// A Mistral repo with tekken.json and no tokenizer.json gets an error that says so.
func TestTekkenOnly(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tekken.json"), []byte(`{"config": {}, "vocab": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "tekken.json but no tokenizer.json") {
		t.Fatalf("tekken.json only: %v", err)
	}
	if err := TekkenOnly(t.TempDir()); err != nil {
		t.Fatalf("an empty directory: %v", err)
	}
}
