package tokenizer

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// bpe is the BPE model of tokenizer.json ("model": {"type": "BPE"}), merging
// exactly as Hugging Face's tokenizers does: the pair of lowest rank first,
// leftmost among equals.
type bpe struct {
	vocab  map[string]int32
	tokens []string // id -> token (model vocab only); "" where unused

	merges map[uint64]merge // (left id, right id) -> rank, merged id

	unk          int32 // -1 when the model has no unk_token
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	prefix       string     // continuing_subword_prefix
	suffix       string     // end_of_word_suffix
	byteTokens   [256]int32 // <0xXX> ids for byte_fallback, -1 when absent

	// byteLevel[b] is the id of the byte-level character of byte b (GPT-2's
	// byte-to-unicode table), -1 when the vocab lacks it. levelOK says all 256
	// are present, so a byte-level word maps straight from its bytes.
	byteLevel [256]int32
	levelOK   bool

	// charIDs[r] is the id of the one-character token r (r < len), -1 when
	// absent: initialSymbols looks characters up here, not in vocab.
	charIDs []int32

	scratch []byte // for addMerge

	cacheMu sync.Mutex
	cache   map[string][]int32
}

type merge struct {
	rank uint32
	id   int32
}

// Words longer than this are not cached (as in HF), and the cache stops
// growing at cacheCap entries; it only ever holds words seen in real input.
const (
	cacheMaxWord = 256
	cacheCap     = 1 << 15
)

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func newBPE(vocab map[string]int32, merges [][2]string, unk *string, fuseUnk, byteFallback, ignoreMerges bool, prefix, suffix string) (*bpe, error) {
	m := &bpe{vocab: vocab, unk: -1, fuseUnk: fuseUnk, byteFallback: byteFallback, ignoreMerges: ignoreMerges,
		prefix: prefix, suffix: suffix, cache: make(map[string][]int32)}
	maxID := int32(-1)
	for tok, id := range vocab {
		if id < 0 {
			return nil, fmt.Errorf("model.vocab: token %q has negative id %d", tok, id)
		}
		maxID = max(maxID, id)
	}
	m.tokens = make([]string, maxID+1)
	for tok, id := range vocab {
		m.tokens[id] = tok
	}
	if unk != nil {
		id, ok := vocab[*unk]
		if !ok {
			return nil, fmt.Errorf("model.unk_token %q is not in the vocab", *unk)
		}
		m.unk = id
	}
	for b := range 256 {
		m.byteTokens[b] = -1
		if id, ok := vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteTokens[b] = id
		}
	}
	m.charIDs = make([]int32, 0x3400) // Latin to CJK punctuation and kana; rarer characters use vocab
	for i := range m.charIDs {
		m.charIDs[i] = -1
	}
	for tok, id := range vocab {
		if r, size := utf8.DecodeRuneInString(tok); size == len(tok) && int(r) < len(m.charIDs) && r != utf8.RuneError {
			m.charIDs[r] = id
		}
	}
	m.levelOK = true
	for b := range 256 {
		m.byteLevel[b] = -1
		if id, ok := vocab[string(byteToRune[b])]; ok {
			m.byteLevel[b] = id
		} else {
			m.levelOK = false
		}
	}
	m.merges = make(map[uint64]merge, len(merges))
	for rank, p := range merges {
		if err := m.addMerge(rank, []byte(p[0]), []byte(p[1])); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// addMerge adds the merge of rank rank. A repeated pair keeps its last rank,
// as HF's map does.
func (m *bpe) addMerge(rank int, left, right []byte) error {
	key, mg, err := m.resolveMerge(rank, left, right, &m.scratch)
	if err == nil {
		m.merges[key] = mg
	}
	return err
}

// resolveMerge looks up the ids of a merge; it only reads m, so several
// goroutines may call it at once with their own scratch buffers.
func (m *bpe) resolveMerge(rank int, left, right []byte, scratch *[]byte) (uint64, merge, error) {
	a, ok := m.vocab[string(left)]
	if !ok {
		return 0, merge{}, fmt.Errorf("model.merges[%d]: token %q is not in the vocab", rank, left)
	}
	b, ok := m.vocab[string(right)]
	if !ok {
		return 0, merge{}, fmt.Errorf("model.merges[%d]: token %q is not in the vocab", rank, right)
	}
	if len(m.prefix) > 0 && len(right) >= len(m.prefix) {
		right = right[len(m.prefix):]
	}
	*scratch = append(append((*scratch)[:0], left...), right...)
	id, ok := m.vocab[string(*scratch)]
	if !ok {
		return 0, merge{}, fmt.Errorf("model.merges[%d]: merged token %q is not in the vocab", rank, *scratch)
	}
	return pairKey(a, b), merge{rank: uint32(rank), id: id}, nil
}

// encode appends the ids of one pre-tokenized word. When byteLevel is set, word
// holds raw bytes that stand for their byte-level characters (GPT-2's mapping),
// which saves building the mapped string.
func (m *bpe) encode(dst []int32, word string, byteLevel bool) []int32 {
	if word == "" {
		return dst
	}
	if byteLevel && !m.levelOK {
		word, byteLevel = byteLevelString(word), false
	}
	cacheable := len(word) <= cacheMaxWord
	if cacheable {
		m.cacheMu.Lock()
		ids, ok := m.cache[word]
		m.cacheMu.Unlock()
		if ok {
			return append(dst, ids...)
		}
	}
	if m.ignoreMerges {
		// A word that is a token is that token, merges or not.
		if id, ok := m.lookupWhole(word, byteLevel); ok {
			m.store(word, []int32{id}, cacheable)
			return append(dst, id)
		}
	}
	var syms []symbol
	if byteLevel && m.prefix == "" && m.suffix == "" {
		syms = make([]symbol, len(word))
		for i := range len(word) {
			syms[i] = symbol{id: m.byteLevel[word[i]], prev: i - 1, next: i + 1}
		}
		syms[len(syms)-1].next = -1
	} else {
		if byteLevel {
			word = byteLevelString(word)
		}
		syms = m.initialSymbols(word)
	}
	m.mergeAll(syms)
	start := len(dst)
	for i := 0; i >= 0 && i < len(syms); i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	m.store(word, dst[start:], cacheable)
	return dst
}

func (m *bpe) store(word string, ids []int32, cacheable bool) {
	if !cacheable {
		return
	}
	ids = slices.Clone(ids)
	m.cacheMu.Lock()
	if len(m.cache) < cacheCap {
		m.cache[word] = ids
	}
	m.cacheMu.Unlock()
}

func (m *bpe) lookupWhole(word string, byteLevel bool) (int32, bool) {
	if !byteLevel {
		id, ok := m.vocab[word]
		return id, ok
	}
	var arr [128]byte // the mapped word, on the stack for short words
	buf := arr[:0]
	for i := range len(word) {
		buf = utf8.AppendRune(buf, byteToRune[word[i]])
	}
	id, ok := m.vocab[string(buf)]
	return id, ok
}

type symbol struct {
	id         int32
	prev, next int // linked list over the initial positions; next -1 at the end
	gone       bool
}

// initialSymbols splits a word into characters (with the subword prefix and
// suffix), falling back to <0xXX> byte tokens or the unk token for characters
// outside the vocab, as HF's BPE::merge_word does.
func (m *bpe) initialSymbols(w string) []symbol {
	ids := make([]int32, 0, len(w))
	unk := false // an unk symbol waits to be added (HF adds it late, after any byte tokens)
	for i := 0; i < len(w); {
		r, size := utf8.DecodeRuneInString(w[i:])
		s := w[i : i+size]
		if m.prefix == "" && m.suffix == "" && int(r) < len(m.charIDs) && m.charIDs[r] >= 0 {
			if unk {
				ids, unk = append(ids, m.unk), false
			}
			ids = append(ids, m.charIDs[r])
			i += size
			continue
		}
		if i > 0 && m.prefix != "" {
			s = m.prefix + s
		}
		i += size
		if i == len(w) && m.suffix != "" {
			s += m.suffix
		}
		if id, ok := m.vocab[s]; ok {
			if unk {
				ids, unk = append(ids, m.unk), false
			}
			ids = append(ids, id)
			continue
		}
		if m.byteFallback && m.allBytes(s) {
			for j := range len(s) {
				ids = append(ids, m.byteTokens[s[j]])
			}
			continue
		}
		if m.unk >= 0 {
			if unk && !m.fuseUnk {
				ids = append(ids, m.unk)
			}
			unk = true
		}
		// Without an unk token HF drops the character.
	}
	if unk {
		ids = append(ids, m.unk)
	}
	syms := make([]symbol, len(ids))
	for i, id := range ids {
		syms[i] = symbol{id: id, prev: i - 1, next: i + 1}
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	return syms
}

func (m *bpe) allBytes(s string) bool {
	for j := range len(s) {
		if m.byteTokens[s[j]] < 0 {
			return false
		}
	}
	return true
}

// mergeAll applies merges by a priority queue of (rank, position), the
// position being the left symbol's initial index. A queued merge is stale when
// the pair at its position no longer produces its merged id; it is skipped
// (HF checks the merged id, not the rank, and so do we; an unchanged pair
// needs no check).
func (m *bpe) mergeAll(syms []symbol) {
	q := mergeQueue(make([]queued, 0, len(syms)))
	for i := 0; i+1 < len(syms); i++ {
		if mg, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			q = append(q, queued{pos: int32(i), rank: mg.rank, id: mg.id, left: syms[i].id, right: syms[i+1].id})
		}
	}
	q.init()
	for len(q) > 0 {
		top := q.pop()
		pos := int(top.pos)
		s := &syms[pos]
		if s.gone || s.next < 0 {
			continue
		}
		right := syms[s.next]
		if s.id != top.left || right.id != top.right {
			// The pair changed since it was queued: HF still merges when the
			// new pair yields the same token.
			if mg, ok := m.merges[pairKey(s.id, right.id)]; !ok || mg.id != top.id {
				continue
			}
		}
		s.id = top.id
		syms[s.next].gone = true
		s.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = pos
		}
		if s.prev >= 0 {
			if mg, ok := m.merges[pairKey(syms[s.prev].id, s.id)]; ok {
				q.push(queued{pos: int32(s.prev), rank: mg.rank, id: mg.id, left: syms[s.prev].id, right: s.id})
			}
		}
		if s.next >= 0 {
			if mg, ok := m.merges[pairKey(s.id, syms[s.next].id)]; ok {
				q.push(queued{pos: top.pos, rank: mg.rank, id: mg.id, left: s.id, right: syms[s.next].id})
			}
		}
	}
}

type queued struct {
	rank        uint32
	pos         int32
	id          int32
	left, right int32 // the pair when queued
}

func (a queued) less(b queued) bool {
	return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos
}

// mergeQueue is a binary min-heap of queued merges (typed, unlike
// container/heap, so pushes do not allocate).
type mergeQueue []queued

func (q *mergeQueue) init() {
	for i := len(*q)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}

func (q *mergeQueue) push(x queued) {
	*q = append(*q, x)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *mergeQueue) pop() queued {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	*q = h[:n]
	q.down(0)
	return top
}

func (q *mergeQueue) down(i int) {
	h := *q
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].less(h[l]) {
			m = r
		}
		if !h[m].less(h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// byteToRune is GPT-2's reversible byte-to-unicode table used by the
// ByteLevel pre-tokenizer and decoder: printable bytes map to themselves, the
// others to U+0100 onwards in byte order.
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var t [256]rune
	inv := make(map[rune]byte, 256)
	n := rune(0)
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			t[b] = rune(b)
		} else {
			t[b] = 256 + n
			n++
		}
		inv[t[b]] = byte(b)
	}
	return t, inv
}()

func byteLevelString(s string) string {
	out := make([]rune, len(s))
	for i := range len(s) {
		out[i] = byteToRune[s[i]]
	}
	return string(out)
}

// byteTokenValue parses a byte-fallback token "<0xXX>".
func byteTokenValue(tok string) (byte, bool) {
	if len(tok) != 6 || tok[:3] != "<0x" || tok[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(tok[3:5], 16, 8)
	return byte(v), err == nil
}
