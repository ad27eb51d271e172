package constrain

import (
	"encoding/binary"
	"slices"
)

// The automaton: a state is a set of stacks (more than one only while anyOf alternatives
// are still ambiguous); a stack is a list of frames, the innermost last. feed moves one
// stack over one byte and adds every stack that results to the next state.

const (
	maxIndent = 32 // spaces or tabs after a newline
	maxDigits = 16 // digits in an integer part or a fraction
	maxExp    = 2  // digits in an exponent (1e99 still parses as a float64)
	maxStacks = 32 // stacks kept in a state; more alternatives are dropped
)

type fkind uint8

const (
	fRoot fkind = iota
	fObj
	fArr
	fStr
	fNum
	fLit
	fQuote // Gemma 4's notation: the opening string marker, a bytes of it read (gemma4.go)
)

// Stages of each frame kind.
const (
	// root
	rStart uint8 = iota // before the value (whitespace allowed)
	rValue              // the value is open
	rDone               // the value is complete: nothing may follow
)

const (
	oStart    uint8 = iota // after {: a key or }
	oKey                   // inside a key of a closed object (a: the key trie's node)
	oKeyStr                // inside a key of an open object (a string frame above)
	oColon                 // after a key: the colon
	oAfter                 // after the colon: the value
	oValue                 // the value is open
	oNext                  // after a value: a comma or }
	oKeyStart              // after a comma: a key
)

const (
	aStart uint8 = iota // after [: an item or ]
	aValue              // an item is open
	aNext               // after an item: a comma or ]
	aItem               // after a comma: an item
)

const (
	sIn  uint8 = iota // string content
	sEsc              // after a backslash
	sU                // inside \uXXXX (b: digits read, c: value so far)
)

const (
	nStart uint8 = iota
	nMinus
	nZero
	nInt
	nDot
	nFrac
	nE
	nESign
	nExp
)

// UTF-8: the range of the next continuation byte, as flag values of a string frame.
const (
	u8Any = iota // 80-BF
	u8E0         // A0-BF (after E0: no overlong forms)
	u8ED         // 80-9F (after ED: no surrogates)
	u8F0         // 90-BF
	u8F4         // 80-8F (nothing above U+10FFFF)
)

type frame struct {
	kind  fkind
	stage uint8
	ws    uint8 // whitespace bytes in the current run
	flag  uint8 // string: the next UTF-8 continuation byte's range
	node  int32
	a     int32 // obj: next property position or key trie node; arr: items; str: characters; num: digits; lit: trie node
	b     int32 // obj: the property whose key was read; str: continuation bytes due, or \u digits read
	c     int32 // str: the pattern's DFA state, or the \u value; bounded num: the fraction's digits
	v     int64 // bounded num: the integer part
	q     uint8 // Gemma 4's notation: str/lit: marker bytes held, and qInStr on a string literal
}

// State is a set of stacks.
type State struct {
	frames []frame
	ends   []int32 // stack i is frames[ends[i-1]:ends[i]]
}

func (s *State) reset() { s.frames, s.ends = s.frames[:0], s.ends[:0] }

func (s *State) n() int { return len(s.ends) }

func (s *State) stack(i int) []frame {
	lo := int32(0)
	if i > 0 {
		lo = s.ends[i-1]
	}
	return s.frames[lo:s.ends[i]]
}

// add appends a copy of st unless the state already holds it.
func (s *State) add(st []frame) {
	for i := range s.ends {
		if slices.Equal(s.stack(i), st) {
			return
		}
	}
	if len(s.ends) >= maxStacks {
		return
	}
	s.frames = append(s.frames, st...)
	s.ends = append(s.ends, int32(len(s.frames)))
}

func (s *State) copyFrom(o *State) {
	s.frames = append(s.frames[:0], o.frames...)
	s.ends = append(s.ends[:0], o.ends...)
}

// key appends a byte encoding of the state (the mask cache's key).
func (s *State) key(dst []byte) []byte {
	for i := range s.ends {
		for _, f := range s.stack(i) {
			dst = append(dst, byte(f.kind), f.stage, f.ws, f.flag, f.q)
			dst = binary.LittleEndian.AppendUint32(dst, uint32(f.node))
			dst = binary.LittleEndian.AppendUint32(dst, uint32(f.a))
			dst = binary.LittleEndian.AppendUint32(dst, uint32(f.b))
			dst = binary.LittleEndian.AppendUint32(dst, uint32(f.c))
			dst = binary.LittleEndian.AppendUint64(dst, uint64(f.v))
		}
		dst = append(dst, 0xff)
	}
	return dst
}

// machine runs the automaton of a schema.
type machine struct {
	s        *Schema
	tmp      []frame
	starting []int32 // the references and unions start is inside
}

func (m *machine) initial(dst *State) {
	dst.reset()
	dst.add([]frame{{kind: fRoot, stage: rStart, node: m.s.root}})
	if m.s.gemmaCall {
		// A call is its object's one property without the braces: the brace is taken.
		var open State
		m.feed(&open, []frame{{kind: fRoot, stage: rStart, node: m.s.root}}, '{')
		dst.copyFrom(&open)
	}
}

// step moves every stack of src over c into dst and reports whether any survived.
func (m *machine) step(dst, src *State, c byte) bool {
	dst.reset()
	for i := range src.ends {
		m.tmp = append(m.tmp[:0], src.stack(i)...)
		if m.s.gemma {
			m.feedGemma(dst, m.tmp, c)
		} else {
			m.feed(dst, m.tmp, c)
		}
	}
	if m.s.gemmaCall {
		m.closeCall(dst)
	}
	return len(dst.ends) > 0
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// ws takes a whitespace byte where whitespace may come. A run of whitespace is one space,
// or a newline and up to maxIndent spaces or tabs, as JSON is laid out: room for any
// indentation, none for a model to wander off into blank lines.
func ws(dst *State, st []frame, top *frame, c byte) {
	switch {
	case top.ws == 0 && c == ' ':
		top.ws = 1
	case top.ws == 0 && c == '\n':
		top.ws = 2
	case top.ws >= 2 && top.ws < 2+maxIndent && (c == ' ' || c == '\t'):
		top.ws++
	default:
		return
	}
	dst.add(st)
}

// feed moves the stack st (which it may modify) over c, adding the results to dst.
func (m *machine) feed(dst *State, st []frame, c byte) {
	top := &st[len(st)-1]
	switch top.kind {
	case fRoot:
		if top.stage != rStart {
			return
		}
		if isWS(c) {
			// Before the value any whitespace (a thinking model writes "\n\n" after
			// </think>), up to maxIndent bytes.
			if top.ws < maxIndent {
				top.ws++
				dst.add(st)
			}
			return
		}
		top.ws, top.stage = 0, rValue
		m.start(dst, st, top.node, c)
	case fObj:
		m.feedObj(dst, st, top, c)
	case fArr:
		m.feedArr(dst, st, top, c)
	case fStr:
		m.feedStr(dst, st, top, c)
	case fNum:
		m.feedNum(dst, st, top, c)
	case fLit:
		lit := &m.s.lits[top.a]
		for _, k := range lit.kids {
			if k.b == c {
				top.a = k.child
				if next := &m.s.lits[k.child]; next.term >= 0 && len(next.kids) == 0 {
					m.done(dst, st[:len(st)-1])
					return
				}
				dst.add(st)
				return
			}
		}
		if lit.term >= 0 { // a complete literal that could have gone on (a number in an enum)
			m.refeed(dst, st[:len(st)-1], c)
		}
	}
}

// done hands a completed value back to its parent (the new top of st) and adds the stack.
func (m *machine) done(dst *State, st []frame) {
	m.complete(st)
	dst.add(st)
}

// refeed completes the value, then gives c to the parent.
func (m *machine) refeed(dst *State, st []frame, c byte) {
	m.complete(st)
	m.feed(dst, st, c)
}

// complete moves the parent (top of st) past its child value.
func (m *machine) complete(st []frame) {
	p := &st[len(st)-1]
	switch p.kind {
	case fRoot:
		p.stage = rDone
	case fObj:
		if p.stage == oKeyStr {
			p.stage = oColon
		} else {
			p.stage = oNext
			if !m.s.nodes[p.node].open {
				p.a = p.b + 1
			}
		}
	case fArr:
		p.stage = aNext
		// Items are counted only as far as a limit needs them, so that the states of
		// later items are the same (and their masks cached).
		nd := &m.s.nodes[p.node]
		if p.a < max(nd.minItems, nd.maxItems) {
			p.a++
		}
	}
	p.ws = 0
}

// start begins a value of node n with its first byte c, pushing its frame(s) on st.
func (m *machine) start(dst *State, st []frame, n int32, c byte) {
	nd := &m.s.nodes[n]
	switch nd.kind {
	case kRef, kUnion:
		// A union may reach itself through references (D = string | D): the inner
		// start would give the same stacks, so it is skipped.
		if slices.Contains(m.starting, n) {
			return
		}
		m.starting = append(m.starting, n)
		if nd.kind == kRef {
			m.start(dst, st, nd.ref, c)
		} else {
			for _, alt := range nd.alts {
				m.start(dst, slices.Clone(st), alt, c)
			}
		}
		m.starting = m.starting[:len(m.starting)-1]
	case kAny:
		switch {
		case c == '{':
			m.start(dst, st, m.s.anyObject, c)
		case c == '[':
			m.start(dst, st, m.s.anyArray, c)
		case c == '"':
			m.start(dst, st, m.s.anyString, c)
		case c == '-' || c >= '0' && c <= '9':
			m.start(dst, st, m.s.anyNumber, c)
		default:
			m.start(dst, st, m.s.anyScalarLit, c)
		}
	case kObject:
		if c == '{' {
			dst.add(append(st, frame{kind: fObj, stage: oStart, node: n}))
		}
	case kArray:
		if c == '[' {
			dst.add(append(st, frame{kind: fArr, stage: aStart, node: n}))
		}
	case kString:
		if c == '"' {
			dst.add(append(st, frame{kind: fStr, stage: sIn, node: n}))
		}
	case kNumber:
		st = append(st, frame{kind: fNum, stage: nStart, node: n})
		m.feedNum(dst, st, &st[len(st)-1], c)
	case kLiteral:
		st = append(st, frame{kind: fLit, node: n, a: nd.lit})
		m.feed(dst, st, c)
	}
}

func (m *machine) feedObj(dst *State, st []frame, top *frame, c byte) {
	nd := &m.s.nodes[top.node]
	switch top.stage {
	case oStart, oNext, oKeyStart:
		if isWS(c) {
			ws(dst, st, top, c)
			return
		}
		top.ws = 0
		if c == '}' && top.stage != oKeyStart && (nd.open || nd.closable[top.a]) {
			m.done(dst, st[:len(st)-1])
			return
		}
		if c == ',' && top.stage == oNext {
			if nd.open || len(m.s.lits[nd.keyTrie[top.a]].kids) > 0 {
				top.stage = oKeyStart
				dst.add(st)
			}
			return
		}
		if c != '"' || top.stage == oNext {
			return
		}
		if nd.open {
			top.stage = oKeyStr
			dst.add(append(st, frame{kind: fStr, stage: sIn, node: m.s.anyString}))
			return
		}
		top.stage, top.a = oKey, nd.keyTrie[top.a]
		m.feedKey(dst, st, top, c)
	case oKey:
		m.feedKey(dst, st, top, c)
	case oColon:
		if isWS(c) {
			ws(dst, st, top, c)
			return
		}
		if c == ':' {
			top.ws, top.stage = 0, oAfter
			dst.add(st)
		}
	case oAfter:
		if isWS(c) {
			ws(dst, st, top, c)
			return
		}
		top.ws, top.stage = 0, oValue
		v := nd.extra
		if !nd.open {
			v = nd.props[top.b].node
		}
		m.start(dst, st, v, c)
	}
}

// feedKey walks a key of a closed object in its trie (top.a); keys end with a quote, so a
// key's end is a leaf.
func (m *machine) feedKey(dst *State, st []frame, top *frame, c byte) {
	for _, k := range m.s.lits[top.a].kids {
		if k.b == c {
			if t := m.s.lits[k.child].term; t >= 0 {
				top.stage, top.b = oColon, t
			} else {
				top.a = k.child
			}
			dst.add(st)
			return
		}
	}
}

func (m *machine) feedArr(dst *State, st []frame, top *frame, c byte) {
	nd := &m.s.nodes[top.node]
	if isWS(c) {
		if top.stage != aValue {
			ws(dst, st, top, c)
		}
		return
	}
	top.ws = 0
	switch top.stage {
	case aStart, aItem:
		if c == ']' && top.stage == aStart && nd.minItems == 0 {
			m.done(dst, st[:len(st)-1])
			return
		}
		if nd.maxItems >= 0 && top.a >= nd.maxItems {
			return
		}
		top.stage = aValue
		m.start(dst, st, nd.items, c)
	case aNext:
		switch {
		case c == ']' && top.a >= nd.minItems:
			m.done(dst, st[:len(st)-1])
		case c == ',' && (nd.maxItems < 0 || top.a < nd.maxItems):
			top.stage = aItem
			dst.add(st)
		}
	}
}

func (m *machine) feedNum(dst *State, st []frame, top *frame, c byte) {
	if b := m.s.nodes[top.node].bounds; b != nil {
		m.feedBounded(dst, st, top, b, c)
		return
	}
	integer := m.s.nodes[top.node].integer
	digit := c >= '0' && c <= '9'
	switch top.stage {
	case nStart, nMinus:
		switch {
		case c == '-' && top.stage == nStart:
			top.stage = nMinus
		case c == '0':
			top.stage = nZero
		case digit:
			top.stage, top.a = nInt, 1
		default:
			return
		}
		dst.add(st)
		return
	case nZero, nInt:
		switch {
		case digit && top.stage == nInt && top.a < maxDigits:
			top.a++
		case c == '.' && !integer:
			top.stage = nDot
		case (c == 'e' || c == 'E') && !integer:
			top.stage = nE
		default:
			m.numEnd(dst, st, c)
			return
		}
	case nDot:
		if !digit {
			return
		}
		top.stage, top.a = nFrac, 1
	case nFrac:
		switch {
		case digit && top.a < maxDigits:
			top.a++
		case c == 'e' || c == 'E':
			top.stage = nE
		default:
			m.numEnd(dst, st, c)
			return
		}
	case nE:
		switch {
		case c == '+' || c == '-':
			top.stage = nESign
		case digit:
			top.stage, top.a = nExp, 1
		default:
			return
		}
	case nESign:
		if !digit {
			return
		}
		top.stage, top.a = nExp, 1
	case nExp:
		if digit && top.a < maxExp {
			top.a++
		} else {
			m.numEnd(dst, st, c)
			return
		}
	}
	dst.add(st)
}

// numEnd ends a number at a byte that cannot continue it, if it is complete.
func (m *machine) numEnd(dst *State, st []frame, c byte) {
	if m.numComplete(st[len(st)-1]) {
		m.refeed(dst, st[:len(st)-1], c)
	}
}

// numComplete reports whether a number frame holds a whole number (within its bounds).
func (m *machine) numComplete(f frame) bool {
	switch f.stage {
	case nZero, nInt, nFrac:
	case nExp:
		return m.s.nodes[f.node].bounds == nil
	default:
		return false
	}
	b := m.s.nodes[f.node].bounds
	if b == nil {
		return true
	}
	v := b.value(&f)
	return b.lo <= v && v <= b.hi
}

// feedBounded moves a number with minimum/maximum over c: digits only as long as some
// completion can still land within the bounds, no exponent.
func (m *machine) feedBounded(dst *State, st []frame, top *frame, b *numBounds, c byte) {
	digit := c >= '0' && c <= '9'
	d := int64(c - '0')
	switch top.stage {
	case nStart, nMinus:
		switch {
		case c == '-' && top.stage == nStart:
			top.stage, top.flag = nMinus, 1
		case c == '0':
			top.stage = nZero
		case digit:
			top.stage, top.a, top.v = nInt, 1, d
		default:
			return
		}
	case nZero, nInt:
		switch {
		case digit && top.stage == nInt && int(top.a) < b.intDigits:
			top.a++
			top.v = top.v*10 + d
		case c == '.' && b.frac > 0:
			top.stage = nDot
		default:
			m.numEnd(dst, st, c)
			return
		}
	case nDot:
		if !digit {
			return
		}
		top.stage, top.a, top.c = nFrac, 1, int32(d)
	case nFrac:
		if digit && int(top.a) < b.frac {
			top.a++
			top.c = top.c*10 + int32(d)
		} else {
			m.numEnd(dst, st, c)
			return
		}
	default:
		return
	}
	if b.feasible(top) {
		dst.add(st)
	}
}

func (m *machine) feedStr(dst *State, st []frame, top *frame, c byte) {
	nd := &m.s.nodes[top.node]
	p := nd.pattern
	// room reports whether one more character may come. Characters are counted only
	// when a length limit needs them, so that the states inside a long free string are
	// the same (and their masks cached).
	room := nd.maxLen < 0 || top.a < nd.maxLen
	count := int32(0)
	if nd.minLen > 0 || nd.maxLen >= 0 {
		count = 1
	}
	switch top.stage {
	case sIn:
		if top.b > 0 { // a UTF-8 continuation byte
			lo, hi := byte(0x80), byte(0xBF)
			switch top.flag {
			case u8E0:
				lo = 0xA0
			case u8ED:
				hi = 0x9F
			case u8F0:
				lo = 0x90
			case u8F4:
				hi = 0x8F
			}
			if c < lo || c > hi {
				return
			}
			top.b--
			top.flag = u8Any
			dst.add(st)
			return
		}
		switch {
		case c == '"':
			if top.a < nd.minLen || p != nil && !p.match[top.c] {
				return
			}
			m.done(dst, st[:len(st)-1])
			return
		case c == '\\':
			if !room || p != nil && !m.escapeFeasible(top) {
				return
			}
			top.stage = sEsc
		case c < 0x20:
			return
		case c < 0x80:
			if !room || !m.patternChar(top, c) {
				return
			}
			top.a += count
		default:
			if !room || p != nil {
				return // pattern strings are ASCII
			}
			switch {
			case c >= 0xC2 && c <= 0xDF:
				top.b = 1
			case c == 0xE0:
				top.b, top.flag = 2, u8E0
			case c == 0xED:
				top.b, top.flag = 2, u8ED
			case c >= 0xE1 && c <= 0xEF:
				top.b = 2
			case c == 0xF0:
				top.b, top.flag = 3, u8F0
			case c == 0xF4:
				top.b, top.flag = 3, u8F4
			case c >= 0xF1 && c <= 0xF3:
				top.b = 3
			default:
				return
			}
			top.a += count
		}
		dst.add(st)
	case sEsc:
		var ch byte
		switch c {
		case '"', '\\', '/':
			ch = c
		case 'b':
			ch = '\b'
		case 'f':
			ch = '\f'
		case 'n':
			ch = '\n'
		case 'r':
			ch = '\r'
		case 't':
			ch = '\t'
		case 'u':
			if p != nil {
				return
			}
			top.stage, top.b, top.c = sU, 0, 0
			dst.add(st)
			return
		default:
			return
		}
		if !m.patternChar(top, ch) {
			return
		}
		top.stage = sIn
		top.a += count
		dst.add(st)
	case sU:
		var v int32
		switch {
		case c >= '0' && c <= '9':
			v = int32(c - '0')
		case c >= 'a' && c <= 'f':
			v = int32(c-'a') + 10
		case c >= 'A' && c <= 'F':
			v = int32(c-'A') + 10
		default:
			return
		}
		// No surrogates (D800-DFFF): a lone one does not decode to a character.
		if top.b == 1 && top.c == 0xD && v >= 8 {
			return
		}
		top.c = top.c<<4 | v
		top.b++
		if top.b == 4 {
			top.stage, top.b, top.c = sIn, 0, 0
			top.a += count
		}
		dst.add(st)
	}
}

// escapeFeasible reports whether some short escape may follow a backslash in a pattern
// string, so that the backslash does not lead to a dead end.
func (m *machine) escapeFeasible(top *frame) bool {
	nd := &m.s.nodes[top.node]
	for _, ch := range []byte{'"', '\\', '/', '\b', '\f', '\n', '\r', '\t'} {
		if nd.pattern.feasible(nd.pattern.next[top.c][ch], top.a+1, nd.minLen, nd.maxLen) {
			return true
		}
	}
	return false
}

// patternChar moves a pattern string's DFA over the character ch (it always holds for a
// string without a pattern), keeping a match within the length limits reachable.
func (m *machine) patternChar(top *frame, ch byte) bool {
	nd := &m.s.nodes[top.node]
	p := nd.pattern
	if p == nil {
		return true
	}
	next := p.next[top.c][ch]
	if !p.feasible(next, top.a+1, nd.minLen, nd.maxLen) {
		return false
	}
	top.c = next
	return true
}

// accepting reports whether the output may end in state s: some stack's value is complete
// (after closing a number or literal that could also go on).
func (m *machine) accepting(s *State) bool {
	for i := range s.ends {
		st := s.stack(i)
		for j := len(st) - 1; ; j-- {
			f := st[j]
			if f.kind == fRoot {
				if f.stage == rDone {
					return true
				}
				break
			}
			if f.kind == fNum && m.numComplete(f) ||
				f.kind == fLit && m.s.lits[f.a].term >= 0 {
				if j == 1 { // the root's value
					return true
				}
			}
			break
		}
	}
	return false
}

// finished reports whether the value is complete and nothing may follow it.
func (m *machine) finished(s *State) bool {
	for i := range s.ends {
		st := s.stack(i)
		if len(st) != 1 || st[0].stage != rDone {
			return false
		}
	}
	return len(s.ends) > 0
}
