package constrain

import (
	"fmt"
	"slices"
)

// Gemma 4 writes a tool call's arguments in a notation of its own rather than JSON
// (text/parser/gemma4.go reads it): keys bare, strings between <|"|> markers with no
// escapes inside, numbers, booleans, null, objects and lists as in JSON:
//
//	{location:<|"|>London, "UK"<|"|>,days:3}
//
// A schema in that notation (Gemma4) runs the same automaton over the JSON the text
// stands for: each byte of Gemma's text is turned into the JSON bytes it means, by where
// the stack is, before the machine takes them. A key's first byte brings its opening
// quote, its colon the closing one; the string markers are quotes; inside a string, a
// quote, a backslash or a control byte becomes its JSON escape. A '<' inside a string
// may be content or the start of the closing marker: the string frame holds the marker's
// bytes read so far (frame.q) and gives them to the string as content when the marker
// breaks off. So every keyword the JSON schema compiles to (enums, patterns, lengths,
// required keys, anyOf) holds in Gemma's notation as it does in JSON.

// Gemma4Quote is the marker Gemma 4 puts around a string (a special token of its
// tokenizer, which a Vocab must hold with these bytes for a string to be written).
const Gemma4Quote = `<|"|>`

const (
	qPending = 0x07 // marker bytes held (1 to 4)
	qInStr   = 0x80 // a literal frame is inside a string (an enum's or const's)
)

// Gemma4 returns s for values written in Gemma 4's notation instead of JSON. It shares
// s's compiled graph.
func (s *Schema) Gemma4() *Schema {
	c := *s
	c.gemma = true
	return &c
}

// Gemma4Call returns s, whose value is an object of one property per tool (the tool's
// name, its parameter schema as the value), for a call in Gemma 4's notation: NAME{…},
// the property's name and value without the object's braces and colon. Exactly one
// property is written.
func (s *Schema) Gemma4Call() *Schema {
	c := *s
	c.gemma, c.gemmaCall = true, true
	return &c
}

// inCall reports whether st's top is the call's object (Gemma4Call): the root's value.
func (m *machine) inCall(st []frame) bool {
	return m.s.gemmaCall && len(st) == 2 && st[1].kind == fObj
}

// closeCall closes the call's object once its one property's value is complete.
func (m *machine) closeCall(s *State) {
	done := false
	for i := range s.ends {
		st := s.stack(i)
		if m.inCall(st) && st[1].stage == oNext {
			done = true
		}
	}
	if !done {
		return
	}
	var out State
	for i := range s.ends {
		st := slices.Clone(s.stack(i))
		if m.inCall(st) && st[1].stage == oNext {
			m.feed(&out, st, '}')
		} else {
			out.add(st)
		}
	}
	s.copyFrom(&out)
}

// feedGemma is feed for a byte of Gemma 4's notation.
func (m *machine) feedGemma(dst *State, st []frame, c byte) {
	top := &st[len(st)-1]
	if m.inCall(st) {
		// The call's name (a key of the object, bare) and the brace that opens its
		// arguments; nothing else at this level.
		switch {
		case (top.stage == oStart || top.stage == oKey) && c == '{':
			if top.stage == oKey {
				m.json(dst, st, []byte(`":{`), nil)
			}
		case top.stage == oStart && c != '"' && c != ':' && c != '}' && c != ',' && !isWS(c):
			m.json(dst, st, []byte{'"', c}, nil)
		case top.stage == oKey && c != '"' && c != '\\' && c != ':' && c >= 0x20:
			m.feed(dst, st, c)
		}
		return
	}
	switch {
	case top.kind == fQuote:
		// The opening marker: once whole, a quote opens the string (or an enum's literal).
		if c != Gemma4Quote[top.a] {
			return
		}
		if top.a++; int(top.a) < len(Gemma4Quote) {
			dst.add(st)
			return
		}
		m.json(dst, st[:len(st)-1], []byte{'"'}, func(dst *State, st []frame) {
			if t := &st[len(st)-1]; t.kind == fLit {
				t.q |= qInStr
			}
			dst.add(st)
		})
	case top.kind == fStr && len(st) > 1 && st[len(st)-2].kind == fObj && st[len(st)-2].stage == oKeyStr,
		top.kind == fObj && top.stage == oKey:
		// Inside a bare key (of an open object, or one of a closed object's names): its
		// colon ends it, and its other bytes are the key's text.
		if c == ':' {
			m.json(dst, st, []byte(`":`), nil)
		} else {
			m.json(dst, st, escapeJSON(nil, []byte{c}), nil)
		}
	case top.kind == fStr && top.stage == sIn && top.b == 0, top.kind == fLit && top.q&qInStr != 0:
		m.content(dst, st, top, c)
	case top.kind == fStr:
		m.feed(dst, st, c) // a UTF-8 continuation byte
	case top.kind == fObj && (top.stage == oStart || top.stage == oKeyStart) && !isWS(c) && c != '}':
		// A bare key begins: its opening quote first.
		if c != ':' && c != ',' {
			m.json(dst, st, escapeJSON([]byte{'"'}, []byte{c}), nil)
		}
	case c == '<':
		// A string's opening marker, where a string may start.
		if m.accepts(st, '"') {
			dst.add(append(st, frame{kind: fQuote, a: 1}))
		}
	case c == '"':
		// Only the marker opens a string.
	default:
		m.feed(dst, st, c)
	}
}

// content takes c inside a string's (or a string literal's) text.
func (m *machine) content(dst *State, st []frame, top *frame, c byte) {
	if p := top.q & qPending; p > 0 {
		if c == Gemma4Quote[p] {
			if p++; int(p) < len(Gemma4Quote) {
				top.q = top.q&^qPending | p
				dst.add(st)
				return
			}
			top.q &^= qPending
			m.feed(dst, st, '"') // the closing marker: the string ends
			return
		}
		// Not the marker: the bytes held were text, and c comes after them.
		top.q &^= qPending
		m.json(dst, st, escapeJSON(nil, []byte(Gemma4Quote[:p])), func(dst *State, st []frame) { m.feedGemma(dst, st, c) })
		return
	}
	if c == '<' {
		// The closing marker, or text: held while either may follow.
		if m.accepts(st, '"') || m.accepts(st, '<') {
			top.q |= 1
			dst.add(st)
		}
		return
	}
	m.json(dst, st, escapeJSON(nil, []byte{c}), nil)
}

// json feeds the JSON bytes seq to the stack st, then hands each stack that results to
// then (nil: adds it to dst).
func (m *machine) json(dst *State, st []frame, seq []byte, then func(dst *State, st []frame)) {
	var cur, next State
	cur.add(st)
	for _, b := range seq {
		next.reset()
		for i := range cur.ends {
			m.feed(&next, slices.Clone(cur.stack(i)), b)
		}
		if cur, next = next, cur; cur.n() == 0 {
			return
		}
	}
	for i := range cur.ends {
		s := slices.Clone(cur.stack(i))
		if then != nil {
			then(dst, s)
		} else {
			dst.add(s)
		}
	}
}

// accepts reports whether the JSON machine takes c after st.
func (m *machine) accepts(st []frame, c byte) bool {
	var s State
	m.feed(&s, slices.Clone(st), c)
	return s.n() > 0
}

// escapeJSON appends text as the inside of a JSON string.
func escapeJSON(dst, text []byte) []byte {
	for _, b := range text {
		switch {
		case b == '"' || b == '\\':
			dst = append(dst, '\\', b)
		case b == '\n':
			dst = append(dst, '\\', 'n')
		case b == '\r':
			dst = append(dst, '\\', 'r')
		case b == '\t':
			dst = append(dst, '\\', 't')
		case b < 0x20:
			dst = fmt.Appendf(dst, `\u%04x`, b)
		default:
			dst = append(dst, b)
		}
	}
	return dst
}
