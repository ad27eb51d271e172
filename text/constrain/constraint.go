package constrain

import (
	"errors"
	"fmt"
	"math"
)

// maxCacheBytes bounds a Constraint's mask cache; when full it starts again empty.
const maxCacheBytes = 64 << 20

// Constraint is one generation's automaton over a vocabulary: Apply masks the logits of the
// next token, Accept moves past the token chosen. Not safe for concurrent use.
type Constraint struct {
	m      machine
	v      *Vocab
	cur    State
	next   State
	save   State
	pa, pb State   // AllowsBytes' states
	ended  bool    // an end-of-sequence token was accepted
	bufs   []State // the walk's state at each trie depth
	cache  map[string]bitset
	bytes  int
	key    []byte
	// Stats: masks computed by walking the trie, and masks found in the cache.
	Walks, Hits int
}

// New returns a constraint at the start of the output.
func (s *Schema) New(v *Vocab) *Constraint {
	c := &Constraint{m: machine{s: s}, v: v, cache: map[string]bitset{}}
	c.m.initial(&c.cur)
	return c
}

// ErrNoToken is returned when no token of the vocabulary can continue the output.
var ErrNoToken = errors.New("constrained decoding: no token of the vocabulary can continue the output as the schema requires")

// Mask returns the set of ids allowed next: a cached set the caller must not modify.
func (c *Constraint) Mask() bitset {
	c.key = c.cur.key(c.key[:0])
	if b, ok := c.cache[string(c.key)]; ok {
		c.Hits++
		return b
	}
	c.Walks++
	b := newBitset(c.v.size)
	if c.m.s.gemma {
		// Gemma 4's notation: a '<' in plain text may start a string's closing marker, so
		// neither shortcut below holds; the machine walks every token.
		c.walk(&c.v.full, 0, 0, &c.cur, b)
	} else if room, ok := c.plainString(); ok {
		// Plain text tokens that fit leave the state as it is: one precomputed set; only
		// the other tokens are walked.
		switch {
		case room < 0 || room >= c.v.maxPlain:
			b.or(c.v.plainAll)
			c.walk(&c.v.rest, 0, 0, &c.cur, b)
		case room <= maxBucket:
			b.or(c.v.plain[room])
			c.walk(&c.v.rest, 0, 0, &c.cur, b)
		default:
			b.or(c.v.plain[maxBucket])
			c.walk(&c.v.restLong, 0, 0, &c.cur, b)
		}
	} else if c.patternString() {
		top := c.cur.frames[len(c.cur.frames)-1]
		c.walkPattern(&c.v.full, 0, 0, top.c, top.a, b)
	} else {
		c.walk(&c.v.full, 0, 0, &c.cur, b)
	}
	if c.m.accepting(&c.cur) {
		for _, id := range c.v.eos {
			if int(id) < c.v.size {
				b.set(id)
			}
		}
	}
	if c.bytes+8*len(b) > maxCacheBytes {
		clear(c.cache)
		c.bytes = 0
	}
	c.cache[string(c.key)] = b
	c.bytes += 8 * len(b)
	return b
}

// plainString reports whether every stack of the state is inside the content of a string
// without a pattern, where plain text tokens keep the state a valid one, and how many more
// characters the string that takes the most may take (-1: no limit): a plain token of up to
// that many characters keeps at least that stack alive, a longer one none.
func (c *Constraint) plainString() (int, bool) {
	room := 0
	for i := range c.cur.n() {
		st := c.cur.stack(i)
		top := st[len(st)-1]
		if top.kind != fStr || top.stage != sIn || top.b != 0 {
			return 0, false
		}
		nd := &c.m.s.nodes[top.node]
		switch {
		case nd.pattern != nil:
			return 0, false
		case nd.maxLen < 0:
			room = -1
		case room >= 0:
			room = max(room, int(nd.maxLen-top.a))
		}
	}
	return room, c.cur.n() > 0
}

// patternString reports whether the state is one stack inside the content of a string with
// a pattern (not in an escape): walkPattern then runs the pattern's DFA alone.
func (c *Constraint) patternString() bool {
	if c.cur.n() != 1 {
		return false
	}
	top := c.cur.frames[len(c.cur.frames)-1]
	return top.kind == fStr && top.stage == sIn && top.b == 0 && c.m.s.nodes[top.node].pattern != nil
}

// walkPattern is walk inside a pattern string (DFA state s, a characters counted): through
// plain ASCII characters it follows the DFA alone, as feedStr would, without the machine; at a
// quote or backslash it goes on with the machine from the equivalent state.
func (c *Constraint) walkPattern(t *trie, n int32, depth int, s, a int32, b bitset) {
	top := c.cur.frames[len(c.cur.frames)-1]
	nd := &c.m.s.nodes[top.node]
	p := nd.pattern
	step := int32(0)
	if nd.minLen > 0 || nd.maxLen >= 0 {
		step = 1
	}
	node := t.nodes[n]
	for _, e := range t.edges[node.edge0 : node.edge0+node.nedge] {
		ch := e.b
		child := t.nodes[e.child]
		switch {
		case ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\':
			if nd.maxLen >= 0 && a >= nd.maxLen {
				continue
			}
			next := p.next[s][ch]
			if !p.feasible(next, a+1, nd.minLen, nd.maxLen) {
				continue
			}
			for _, id := range t.toks[child.tok0 : child.tok0+child.ntok] {
				b.set(id)
			}
			if child.nedge > 0 {
				c.walkPattern(t, e.child, depth+1, next, a+step, b)
			}
		case ch == '"' || ch == '\\':
			// The machine from here: the current state with the string at (s, a).
			if len(c.bufs) <= depth+1 {
				c.bufs = append(c.bufs, make([]State, depth+2-len(c.bufs))...)
			}
			here := &c.bufs[depth]
			here.copyFrom(&c.cur)
			f := &here.frames[len(here.frames)-1]
			f.c, f.a = s, a
			next := &c.bufs[depth+1]
			if !c.m.step(next, here, ch) {
				continue
			}
			for _, id := range t.toks[child.tok0 : child.tok0+child.ntok] {
				b.set(id)
			}
			if child.nedge > 0 {
				c.walk(t, e.child, depth+2, next, b)
			}
		}
		// Other bytes (control, non-ASCII) end a pattern string's prefix.
	}
}

// walk adds to b the tokens of the subtree of trie node n (at depth) that st accepts.
func (c *Constraint) walk(t *trie, n int32, depth int, st *State, b bitset) {
	if len(c.bufs) <= depth {
		c.bufs = append(c.bufs, State{})
	}
	nd := t.nodes[n]
	for _, e := range t.edges[nd.edge0 : nd.edge0+nd.nedge] {
		next := &c.bufs[depth]
		if !c.m.step(next, st, e.b) {
			continue
		}
		child := t.nodes[e.child]
		for _, id := range t.toks[child.tok0 : child.tok0+child.ntok] {
			b.set(id)
		}
		if child.nedge > 0 {
			c.walk(t, e.child, depth+1, next, b)
		}
	}
}

// Apply sets the logits of every token that may not come next to -Inf. It returns
// ErrNoToken when none may.
func (c *Constraint) Apply(logits []float32) error {
	b := c.Mask()
	any := false
	inf := float32(math.Inf(-1))
	for w := 0; w*64 < len(logits); w++ {
		var word uint64
		if w < len(b) {
			word = b[w]
		}
		lo, hi := w*64, min(w*64+64, len(logits))
		if word == ^uint64(0) && hi-lo == 64 {
			any = true
			continue
		}
		for i := lo; i < hi; i++ {
			if word&(1<<uint(i-lo)) == 0 {
				logits[i] = inf
			} else {
				any = true
			}
		}
	}
	if !any {
		return ErrNoToken
	}
	return nil
}

// Allowed reports whether id may come next.
func (c *Constraint) Allowed(id int32) bool {
	return id >= 0 && int(id) < c.v.size && c.Mask().has(id)
}

// Accept moves past token id; an id the state does not allow is an error and leaves the
// state as it was. End-of-sequence ids are accepted only where the output may end.
func (c *Constraint) Accept(id int32) error {
	if id < 0 || int(id) >= c.v.size {
		return fmt.Errorf("constrained decoding: token %d is outside the vocabulary", id)
	}
	b := c.v.bytes[id]
	if b == nil {
		for _, e := range c.v.eos {
			if e == id && c.m.accepting(&c.cur) {
				c.ended = true
				return nil
			}
		}
		return fmt.Errorf("constrained decoding: token %d is not text the schema allows here", id)
	}
	if err := c.AcceptBytes(b); err != nil {
		return fmt.Errorf("constrained decoding: token %d (%q): %w", id, b, err)
	}
	return nil
}

// AcceptBytes moves past text; text the state does not allow is an error and leaves the
// state as it was.
func (c *Constraint) AcceptBytes(text []byte) error {
	c.save.copyFrom(&c.cur)
	for i, ch := range text {
		if !c.m.step(&c.next, &c.cur, ch) {
			c.cur.copyFrom(&c.save)
			return fmt.Errorf("byte %d (%q) is not allowed", i, ch)
		}
		c.cur, c.next = c.next, c.cur
	}
	return nil
}

// AllowsBytes reports whether text may come next, leaving the state as it is: the
// definition that Mask computes faster (tests compare the two).
func (c *Constraint) AllowsBytes(text []byte) bool {
	c.pa.copyFrom(&c.cur)
	for _, ch := range text {
		if !c.m.step(&c.pb, &c.pa, ch) {
			return false
		}
		c.pa, c.pb = c.pb, c.pa
	}
	return true
}

// Accepting reports whether the output may end here: it is a complete value.
func (c *Constraint) Accepting() bool { return c.m.accepting(&c.cur) }

// Finished reports whether the value is complete and nothing may follow it (the caller
// ends generation without asking the model).
func (c *Constraint) Finished() bool {
	if c.ended || c.m.finished(&c.cur) {
		return true
	}
	// A complete value that could go on (a number) where no token continues it and the
	// vocabulary has no end-of-sequence token: it ends here.
	return c.m.accepting(&c.cur) && c.Mask().empty()
}
