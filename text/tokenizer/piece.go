package tokenizer

import "strings"

// Piece returns the bytes token id stands for on its own, as it continues a text: an
// added token's content; a byte-level or <0xXX> byte token's raw bytes, which may be part
// of a UTF-8 character; otherwise the decoder's text for it after another token (so that
// a metaspace "▁" reads as the space it is mid-text). nil for an id outside the
// vocabulary. Log-probability reports name their tokens with it.
func (t *Tokenizer) Piece(id int32) []byte {
	tok, ok := t.token(id)
	switch {
	case !ok:
		return nil
	case t.IsSpecial(id):
		return []byte(tok) // as Decode keeps it; other added tokens (Gemma's "▁▁") go through the decoder
	case t.decBytes == byteLevelBytes:
		return appendByteLevel(nil, tok)
	}
	if b, ok := byteTokenValue(tok); ok && t.decBytes == fallbackBytes {
		return []byte{b}
	}
	if t.dec == nil {
		return []byte(tok)
	}
	// Decoded after a plain letter, the token is mid-text: the decoders' rules for the start
	// of a text (a metaspace or Strip decoder dropping a leading space) do not apply to it.
	if s := joinEmpty(t.dec.decodeChain([]string{"a", tok})); strings.HasPrefix(s, "a") {
		return []byte(s[1:])
	}
	return []byte(joinEmpty(t.dec.decodeChain([]string{tok})))
}
