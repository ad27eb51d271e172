package tokenizer

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestPiece: each token's piece is what it adds mid-text, so the pieces of an encoded text
// spell the text (a prepended metaspace "▁" becomes a leading space), byte tokens give
// their raw bytes (half a character here and there), and added tokens their content.
func TestPiece(t *testing.T) {
	const text = "Hello wörld, 日本語 text\twith  spaces and émoji 🎉!"
	for _, fam := range []string{"qwen3", "llama3_1", "deepseek_v3", "llama2", "gemma3"} {
		tok := family(t, fam)
		var got []byte
		partial := false
		for _, id := range tok.Encode(text, false) {
			p := tok.Piece(id)
			if len(p) == 0 {
				t.Fatalf("%s: id %d (%q) has an empty piece", fam, id, tok.Token(id))
			}
			partial = partial || !utf8.Valid(p)
			got = append(got, p...)
		}
		if s := strings.TrimPrefix(string(got), " "); s != text {
			t.Errorf("%s: pieces spell %q, want %q", fam, got, text)
		}
		if fam == "qwen3" && !partial {
			t.Errorf("%s: no piece was part of a character: the test text does not exercise byte pieces", fam)
		}
		if tok.Piece(-1) != nil || tok.Piece(int32(tok.VocabSize())) != nil {
			t.Errorf("%s: a piece for an id outside the vocabulary", fam)
		}
	}
	q := family(t, "qwen3")
	if id, _ := q.TokenID("<|im_end|>"); !bytes.Equal(q.Piece(id), []byte("<|im_end|>")) {
		t.Errorf("added token piece %q", q.Piece(id))
	}
	l := family(t, "llama2")
	if id, ok := l.TokenID("<0xE6>"); !ok || !bytes.Equal(l.Piece(id), []byte{0xE6}) {
		t.Errorf("byte token piece %q", l.Piece(id))
	}
	if id, ok := l.TokenID("▁the"); !ok || string(l.Piece(id)) != " the" {
		t.Errorf("metaspace piece %q, want \" the\"", l.Piece(id))
	}
}
