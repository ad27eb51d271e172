package constrain

import (
	"bytes"
	"slices"
	"unicode/utf8"
)

// maxBucket is the longest plain-text token (in characters) that has its own set for
// strings with a maxLength; longer tokens are in the last set.
const maxBucket = 16

// Vocab is a tokenizer's vocabulary as bytes, in the shape constrained decoding walks:
// built once per tokenizer and shared (read-only) by every Constraint.
type Vocab struct {
	size  int      // ids 0..size-1 (the logits' length may be larger: those ids are never allowed)
	bytes [][]byte // nil: a token that never appears in constrained output (special, or empty)
	eos   []int32
	full  trie // every token with bytes
	rest  trie // the tokens that are not plain string text
	// restLong: rest and the plain tokens of more than maxBucket characters.
	restLong trie
	// plain[k]: the tokens that are plain string text (complete UTF-8, no quote, backslash
	// or control byte) of at most k characters; plainAll: all of them, the longest of
	// maxPlain characters.
	plain    [maxBucket + 1]bitset
	plainAll bitset
	maxPlain int
}

// NewVocab builds the vocabulary of size ids: tokenBytes gives a token's bytes (false for
// a token that must not appear, such as a special one), eos the ids that end generation.
func NewVocab(size int, tokenBytes func(id int32) ([]byte, bool), eos []int32) *Vocab {
	v := &Vocab{size: size, bytes: make([][]byte, size), eos: slices.Clone(eos)}
	for k := range v.plain {
		v.plain[k] = newBitset(size)
	}
	v.plainAll = newBitset(size)
	var all, rest, long []int32
	for id := range int32(size) {
		b, ok := tokenBytes(id)
		if !ok || len(b) == 0 || slices.Contains(eos, id) {
			continue
		}
		v.bytes[id] = b
		all = append(all, id)
		if n, ok := plainChars(b); ok {
			v.plainAll.set(id)
			v.maxPlain = max(v.maxPlain, n)
			for k := n; k <= maxBucket; k++ {
				v.plain[k].set(id)
			}
			if n > maxBucket {
				long = append(long, id)
			}
		} else {
			rest = append(rest, id)
		}
	}
	v.full = buildTrie(v.bytes, all)
	v.rest = buildTrie(v.bytes, rest)
	v.restLong = buildTrie(v.bytes, append(rest, long...))
	return v
}

// Size is the number of ids the vocabulary covers.
func (v *Vocab) Size() int { return v.size }

// plainChars reports whether b is plain string text, and its length in characters.
func plainChars(b []byte) (int, bool) {
	if !utf8.Valid(b) {
		return 0, false
	}
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' {
			return 0, false
		}
	}
	return utf8.RuneCount(b), true
}

type bitset []uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }

func (b bitset) set(i int32)      { b[i>>6] |= 1 << (uint(i) & 63) }
func (b bitset) has(i int32) bool { return b[i>>6]&(1<<(uint(i)&63)) != 0 }

func (b bitset) empty() bool {
	for _, w := range b {
		if w != 0 {
			return false
		}
	}
	return true
}

func (b bitset) or(o bitset) {
	for i := range b {
		b[i] |= o[i]
	}
}

// trie is a byte trie of tokens, children stored contiguously.
type trie struct {
	nodes []tnode
	edges []tedge
	toks  []int32
}

type tnode struct {
	edge0, nedge int32 // edges[edge0 : edge0+nedge], sorted by byte
	tok0, ntok   int32 // toks[tok0 : tok0+ntok]: the tokens that end here
}

type tedge struct {
	b     byte
	child int32
}

func buildTrie(tokBytes [][]byte, ids []int32) trie {
	ids = slices.Clone(ids)
	slices.SortFunc(ids, func(a, b int32) int {
		if c := bytes.Compare(tokBytes[a], tokBytes[b]); c != 0 {
			return c
		}
		return int(a - b)
	})
	var t trie
	var build func(ids []int32, depth int) int32
	build = func(ids []int32, depth int) int32 {
		n := int32(len(t.nodes))
		t.nodes = append(t.nodes, tnode{})
		i := 0
		t.nodes[n].tok0 = int32(len(t.toks))
		for i < len(ids) && len(tokBytes[ids[i]]) == depth {
			t.toks = append(t.toks, ids[i])
			i++
		}
		t.nodes[n].ntok = int32(i)
		// Group the rest by their byte at depth.
		type group struct {
			b      byte
			lo, hi int
		}
		var groups []group
		for i < len(ids) {
			b := tokBytes[ids[i]][depth]
			j := i
			for j < len(ids) && tokBytes[ids[j]][depth] == b {
				j++
			}
			groups = append(groups, group{b, i, j})
			i = j
		}
		e0 := int32(len(t.edges))
		t.nodes[n].edge0, t.nodes[n].nedge = e0, int32(len(groups))
		for _, g := range groups {
			t.edges = append(t.edges, tedge{b: g.b})
		}
		for k, g := range groups {
			child := build(ids[g.lo:g.hi], depth+1)
			t.edges[e0+int32(k)].child = child
		}
		return n
	}
	build(ids, 0)
	return t
}
