package tokenizer

import (
	"bytes"
	"encoding/json"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// randomToken returns a string with the characters JSON encoders escape:
// quotes, backslashes, control characters, <>&, U+2028, non-BMP runes.
func randomToken(rng *rand.Rand) string {
	pieces := []string{"a", "Ġ", "▁", "\"", "\\", "/", "\n", "\t", "\x00", "\x1f", "<", ">", "&", "\u2028", "😀", "é", " ", "\ufffd", "{", "]", ","}
	var b strings.Builder
	for range 1 + rng.IntN(6) {
		b.WriteString(pieces[rng.IntN(len(pieces))])
	}
	return b.String()
}

// TestReadModelMatchesEncodingJSON checks the jsonScanner against
// encoding/json on random vocabularies and merges in both serializations.
func TestReadModelMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 50 {
		vocab := map[string]int32{}
		var toks []string
		for len(vocab) < 40 {
			tok := randomToken(rng)
			if _, ok := vocab[tok]; !ok && !strings.Contains(tok, " ") {
				vocab[tok] = int32(len(vocab))
				toks = append(toks, tok)
			}
		}
		var pairs [][2]string
		for _, a := range toks {
			for _, b := range toks {
				if _, ok := vocab[a+b]; ok && len(pairs) < 30 {
					pairs = append(pairs, [2]string{a, b})
				}
			}
		}
		var merges any = pairs
		if trial%2 == 1 {
			lines := make([]string, len(pairs))
			for i, p := range pairs {
				lines[i] = p[0] + " " + p[1]
			}
			merges = lines
		}
		model := map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "unk_token": nil, "dropout": nil}
		data, err := json.MarshalIndent(model, "", " \t")
		if err != nil {
			t.Fatal(err)
		}
		// Escapes encoding/json does not write: surrogate pairs, \u00e9, \/.
		data = bytes.ReplaceAll(data, []byte("😀"), []byte(`\ud83d\ude00`))
		data = bytes.ReplaceAll(data, []byte("é"), []byte(`\u00e9`))
		data = bytes.ReplaceAll(data, []byte("/"), []byte(`\/`))
		m, err := readModel(data)
		if err != nil {
			t.Fatalf("readModel(%s): %v", data, err)
		}
		if !maps.Equal(m.vocab, vocab) {
			t.Fatalf("vocab differs:\n got %v\nwant %v", m.vocab, vocab)
		}
		want, err := newBPE(vocab, pairs, nil, false, false, false, "", "")
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(m.merges, want.merges) {
			t.Fatalf("merges differ for %s", data)
		}
	}
}

// FuzzParse: any bytes as tokenizer.json give a tokenizer or an error, never
// a panic; a tokenizer that loads encodes and decodes.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}`))
	f.Add([]byte(`{"added_tokens": [{"id": 3, "content": "<s>", "special": true}], "normalizer": {"type": "NFC"},
		"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated"},
		{"type": "ByteLevel", "use_regex": false}]}, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}},
		{"Sequence": {"id": "A"}}], "special_tokens": {"<s>": {"ids": [3]}}}, "decoder": {"type": "ByteLevel"},
		"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 4}, "merges": [["a", "b"]], "unk_token": null}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := parse(data)
		if err != nil {
			return
		}
		ids := tok.Encode("ab a\xffb <s>", true)
		tok.Decode(ids, false)
		tok.Decode(slices.Concat(ids, []int32{-1, 1 << 30}), true)
	})
}
