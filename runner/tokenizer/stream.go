package tokenizer

import "strings"

// StreamDecoder turns ids into text one at a time, for streaming generation.
// Add returns only text that is final: never half a UTF-8 character (a byte
// token or byte-level piece that needs the next ones), and never text that a
// later token would change. The concatenation of everything Add and Flush
// return equals Decode of all ids, except where a model emits byte tokens
// whose run is invalid UTF-8 only in combination with later ones.
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
	if len(text) <= len(d.ctxText) || strings.HasSuffix(text, "\uFFFD") {
		return "" // nothing new, or the last character may be incomplete
	}
	var out string
	if strings.HasPrefix(text, d.ctxText) {
		out = text[len(d.ctxText):]
	} else {
		// The context decodes differently once followed by these tokens (an
		// invalid byte run): restart from the new tokens alone.
		out = d.t.Decode(d.pending, d.skipSpecial)
	}
	d.ctx = append(d.ctx[:0], d.pending...)
	d.pending = d.pending[:0]
	d.ctxText = d.t.Decode(d.ctx, d.skipSpecial)
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
	d.ctx = append(d.ctx[:0], d.pending...)
	d.pending = d.pending[:0]
	d.ctxText = d.t.Decode(d.ctx, d.skipSpecial)
	return out
}
