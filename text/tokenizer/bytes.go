package tokenizer

import "strings"

// TokenBytes returns the bytes that token id adds to the output when it follows other
// tokens, as the streaming decoder produces them: a byte-level piece's raw bytes (possibly
// part of a UTF-8 character), a <0xXX> byte token's byte, or a token's decoded text. It
// reports false for special tokens (they are control tokens, not text), for ids outside
// the vocabulary, and for tokens that decode to nothing. A constrained decoder
// (text/constrain's Vocab) reads every token through it.
func (t *Tokenizer) TokenBytes(id int32) ([]byte, bool) {
	tok, ok := t.token(id)
	if !ok || t.special[tok] {
		return nil, false
	}
	var b []byte
	switch {
	case t.decBytes == byteLevelBytes:
		b = appendByteLevel(nil, tok)
	case t.decBytes == fallbackBytes:
		if v, isByte := byteTokenValue(tok); isByte {
			b = []byte{v}
			break
		}
		b = []byte(t.midText(tok))
	default:
		b = []byte(t.midText(tok))
	}
	return b, len(b) > 0
}

// midText decodes tok as a token after the first one, so that a decoder's rules for the
// start of the text (a stripped leading space) do not apply: it decodes a plain letter
// followed by tok and drops the letter.
func (t *Tokenizer) midText(tok string) string {
	const lead = "a"
	if t.dec == nil {
		return " " + tok // joinSpace puts a space between tokens
	}
	s := joinEmpty(t.dec.decodeChain([]string{lead, tok}))
	return strings.TrimPrefix(s, lead)
}
