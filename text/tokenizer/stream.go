package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// StreamDecoder turns ids into text one at a time, for streaming generation.
// Add returns only text that is final: it holds back the first bytes of a
// UTF-8 character (byte-level pieces or <0xXX> byte tokens) until the
// character is complete, and never returns text that a later token would
// change. Special tokens are single ids, so they are never split. The
// concatenation of everything Add and Flush return equals Decode of all ids,
// except where a model emits a run of byte tokens that starts with a valid
// character and turns invalid later (HF then decodes the whole run as U+FFFD
// per byte, after the character was streamed).
//
// It works like HF's DecodeStream: it decodes a short window (the tokens of
// the last emission, for context such as a leading-space strip, plus the new
// ones) and emits what the window adds beyond its context.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	ctx         []int32 // tokens already emitted, kept as context
	ctxText     string  // Decode(ctx)
	pending     []int32 // tokens not yet emitted
	window      []int32
}

// NewStreamDecoder returns a decoder for one stream of ids.
func (t *Tokenizer) NewStreamDecoder(skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: skipSpecial}
}

// Add adds one id and returns the text that became final, possibly "".
func (d *StreamDecoder) Add(id int32) string {
	d.pending = append(d.pending, id)
	d.window = append(append(d.window[:0], d.ctx...), d.pending...)
	text := d.t.Decode(d.window, d.skipSpecial)
	if len(text) <= len(d.ctxText) || strings.HasSuffix(text, "\uFFFD") && d.t.incomplete(d.window, d.skipSpecial) {
		return "" // nothing new, or the last character is not complete yet
	}
	var out string
	if strings.HasPrefix(text, d.ctxText) {
		out = text[len(d.ctxText):]
	} else {
		// The context decodes differently once followed by these tokens (an
		// invalid byte run): restart from the new tokens alone.
		out = d.t.Decode(d.pending, d.skipSpecial)
	}
	d.advance()
	return out
}

// Flush returns the text still held back (an incomplete character at the
// end becomes U+FFFD), for the end of a stream.
func (d *StreamDecoder) Flush() string {
	if len(d.pending) == 0 {
		return ""
	}
	d.window = append(append(d.window[:0], d.ctx...), d.pending...)
	text := d.t.Decode(d.window, d.skipSpecial)
	out := d.t.Decode(d.pending, d.skipSpecial)
	if strings.HasPrefix(text, d.ctxText) {
		out = text[len(d.ctxText):]
	}
	d.advance()
	return out
}

// advance makes the pending tokens the context. With a ByteFallback decoder
// the context also keeps the run of byte tokens that the pending ones
// continue, since HF decodes a run as a whole.
func (d *StreamDecoder) advance() {
	keep := 0
	if d.t.decBytes == fallbackBytes && d.t.startsWithByte(d.pending, d.skipSpecial) {
		for keep < len(d.ctx) && d.t.isByteOrDropped(d.ctx[len(d.ctx)-1-keep], d.skipSpecial) {
			keep++
		}
	}
	d.ctx = append(d.ctx[:0], d.ctx[len(d.ctx)-keep:]...)
	d.ctx = append(d.ctx, d.pending...)
	d.pending = d.pending[:0]
	d.ctxText = d.t.Decode(d.ctx, d.skipSpecial)
}

func (t *Tokenizer) isByteOrDropped(id int32, skipSpecial bool) bool {
	tok, ok := t.token(id)
	if !ok || skipSpecial && t.special[tok] {
		return true
	}
	_, isByte := byteTokenValue(tok)
	return isByte
}

// startsWithByte reports whether the first token Decode keeps is a byte token.
func (t *Tokenizer) startsWithByte(ids []int32, skipSpecial bool) bool {
	for _, id := range ids {
		tok, ok := t.token(id)
		if !ok || skipSpecial && t.special[tok] {
			continue
		}
		_, isByte := byteTokenValue(tok)
		return isByte
	}
	return false
}

// incomplete reports whether ids end with the first bytes of a UTF-8
// character that later tokens could complete: byte-level pieces or <0xXX>
// byte tokens, depending on the decoder. A U+FFFD that no later token can
// change (an invalid byte, or a real U+FFFD in the text) is emitted at once.
func (t *Tokenizer) incomplete(ids []int32, skipSpecial bool) bool {
	var tail []byte
	n := 0
	for i := len(ids) - 1; i >= 0 && n < utf8.UTFMax; i-- {
		tok, ok := t.token(ids[i])
		if !ok || skipSpecial && t.special[tok] {
			continue // Decode drops it
		}
		n++
		switch {
		case t.decBytes == byteLevelBytes:
			tail = append(appendByteLevel(nil, tok), tail...)
		case t.decBytes == fallbackBytes:
			b, ok := byteTokenValue(tok)
			if !ok {
				return incompleteTail(tail)
			}
			tail = append([]byte{b}, tail...)
		default:
			return false
		}
	}
	return incompleteTail(tail)
}

// incompleteTail reports whether b ends with a proper prefix of a
// well-formed UTF-8 sequence.
func incompleteTail(b []byte) bool {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < utf8.RuneSelf {
			return false
		}
		if c >= 0xC0 { // a lead byte
			need := 0
			switch {
			case c >= 0xC2 && c <= 0xDF:
				need = 2
			case c >= 0xE0 && c <= 0xEF:
				need = 3
			case c >= 0xF0 && c <= 0xF4:
				need = 4
			}
			return k < need && invalidPrefix(b[len(b)-k:]) == k
		}
	}
	return false
}
