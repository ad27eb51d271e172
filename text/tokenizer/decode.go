package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// decoder turns token strings back into text, as HF's Decoder::decode_chain:
// each step maps the list of strings, and the results are concatenated.
type decoder interface {
	decodeChain(tokens []string) []string
}

type decSequence []decoder

func (q decSequence) decodeChain(t []string) []string {
	for _, d := range q {
		t = d.decodeChain(t)
	}
	return t
}

// byteLevelDec maps GPT-2 byte characters back to bytes. A token with any
// other character keeps its own UTF-8 bytes (as HF does for added tokens such
// as "<｜User｜>"); invalid UTF-8 in the result becomes U+FFFD.
type byteLevelDec struct{}

func (byteLevelDec) decodeChain(tokens []string) []string {
	var buf []byte
	for _, t := range tokens {
		buf = appendByteLevel(buf, t)
	}
	return []string{lossy(buf)}
}

func appendByteLevel(buf []byte, t string) []byte {
	start := len(buf)
	for _, r := range t {
		b, ok := runeToByte[r]
		if !ok {
			return append(buf[:start], t...)
		}
		buf = append(buf, b)
	}
	return buf
}

type replaceDec struct{ old, new string }

func (r replaceDec) decodeChain(t []string) []string {
	for i := range t {
		t[i] = strings.ReplaceAll(t[i], r.old, r.new)
	}
	return t
}

// byteFallbackDec turns runs of <0xXX> tokens into their UTF-8 text; a run
// that is not valid UTF-8 becomes one U+FFFD per byte, as in HF.
type byteFallbackDec struct{}

func (byteFallbackDec) decodeChain(tokens []string) []string {
	out := make([]string, 0, len(tokens))
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	for _, t := range tokens {
		if b, ok := byteTokenValue(t); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

type fuseDec struct{}

func (fuseDec) decodeChain(t []string) []string { return []string{strings.Join(t, "")} }

// stripDec removes up to start leading and stop trailing copies of a
// character from every token.
type stripDec struct {
	content     rune
	start, stop int
}

func (d stripDec) decodeChain(t []string) []string {
	for i, tok := range t {
		r := []rune(tok)
		lo, hi := 0, len(r)
		for lo < d.start && lo < len(r) && r[lo] == d.content {
			lo++
		}
		for n := 0; n < d.stop && hi > lo && r[hi-1] == d.content; n++ {
			hi--
		}
		t[i] = string(r[lo:hi])
	}
	return t
}

// metaspaceDec turns the replacement character back into spaces; in the
// first token it drops them instead (they were prepended), unless the
// prepend scheme is "never".
type metaspaceDec struct {
	replacement string
	strip       bool
}

func (d metaspaceDec) decodeChain(t []string) []string {
	for i := range t {
		if i == 0 && d.strip {
			t[i] = strings.ReplaceAll(t[i], d.replacement, "")
		} else {
			t[i] = strings.ReplaceAll(t[i], d.replacement, " ")
		}
	}
	return t
}

// byteSource says how a decoder chain turns tokens into raw bytes, which may
// split UTF-8 characters across tokens.
type byteSource int

const (
	noBytes        byteSource = iota
	byteLevelBytes            // ByteLevel: every token is bytes
	fallbackBytes             // ByteFallback: <0xXX> tokens are bytes
)

func bytesOf(d decoder) byteSource {
	switch d := d.(type) {
	case byteLevelDec:
		return byteLevelBytes
	case byteFallbackDec:
		return fallbackBytes
	case decSequence:
		for _, x := range d {
			if b := bytesOf(x); b != noBytes {
				return b
			}
		}
	}
	return noBytes
}

func parseDecoder(raw json.RawMessage) (decoder, error) {
	if isNull(raw) {
		return nil, nil
	}
	var head struct {
		Type     string            `json:"type"`
		Decoders []json.RawMessage `json:"decoders"`
		Pattern  pattern           `json:"pattern"`
		Content  string            `json:"content"`
		Start    int               `json:"start"`
		Stop     int               `json:"stop"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	switch head.Type {
	case "ByteLevel":
		return byteLevelDec{}, nil
	case "ByteFallback":
		return byteFallbackDec{}, nil
	case "Fuse":
		return fuseDec{}, nil
	case "Replace":
		if head.Pattern.String == nil {
			return nil, fmt.Errorf("decoder Replace: only a String pattern is supported, not %s", raw)
		}
		return replaceDec{*head.Pattern.String, head.Content}, nil
	case "Strip":
		r, size := utf8.DecodeRuneInString(head.Content)
		if size == 0 || size != len(head.Content) {
			return nil, fmt.Errorf("decoder Strip: content %q must be one character", head.Content)
		}
		return stripDec{content: r, start: head.Start, stop: head.Stop}, nil
	case "Metaspace":
		m, err := parseMetaspace(raw)
		if err != nil {
			return nil, fmt.Errorf("decoder %w", err)
		}
		return metaspaceDec{replacement: m.replacement, strip: m.prepend != "never"}, nil
	case "Sequence":
		var seq decSequence
		for _, r := range head.Decoders {
			d, err := parseDecoder(r)
			if err != nil {
				return nil, err
			}
			if d != nil {
				seq = append(seq, d)
			}
		}
		return seq, nil
	}
	return nil, fmt.Errorf("unsupported decoder type %q (supported: ByteLevel, ByteFallback, Fuse, Metaspace, Replace, Strip, Sequence)", head.Type)
}

// lossy converts bytes to a string, replacing each maximal invalid subpart
// with one U+FFFD, as Rust's String::from_utf8_lossy does (Go's own
// conversions differ: they replace byte by byte or run by run).
func lossy(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || size > 1 {
			sb.Write(b[i : i+size])
			i += size
			continue
		}
		sb.WriteRune(utf8.RuneError)
		i += invalidPrefix(b[i:])
	}
	return sb.String()
}

// invalidPrefix is the length of the maximal subpart at the start of b, an
// invalid sequence: the longest prefix of a well-formed sequence, at least 1.
func invalidPrefix(b []byte) int {
	c := b[0]
	var n int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		n = 2
	case c == 0xE0:
		n, lo = 3, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		n = 3
	case c == 0xED:
		n, hi = 3, 0x9F
	case c == 0xF0:
		n, lo = 4, 0x90
	case c >= 0xF1 && c <= 0xF3:
		n = 4
	case c == 0xF4:
		n, hi = 4, 0x8F
	default:
		return 1
	}
	i := 1
	for ; i < n && i < len(b); i++ {
		if b[i] < lo || b[i] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return i
}
