package kvstore

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
)

// PrefixFormatVersion is the version of the prefix blocks' contents and of their files;
// it is part of every model key, so blocks of another version are never read.
const PrefixFormatVersion = 1

// Hash names a block: SHA256(parent_hash || model_key || token ids as little-endian int32).
// Block 0's parent is the zero hash.
type Hash [32]byte

func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// ModelKey covers everything a block's contents depend on besides its tokens: the
// checkpoint's identity, every layer's cache kind, shape and spec, and the format version.
type ModelKey Hash

func (k ModelKey) String() string { return hex.EncodeToString(k[:]) }

// ChainHash names the block holding tokens after the block named parent.
func ChainHash(parent Hash, key ModelKey, tokens []int32) Hash {
	h := sha256.New()
	h.Write(parent[:])
	h.Write(key[:])
	buf := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(t))
	}
	h.Write(buf)
	var out Hash
	h.Sum(out[:0])
	return out
}

// Seq is what the prefix cache sees of one sequence: one attention cache per model layer
// (nil where a layer keeps no per-token KV) and, for a hybrid model, the recurrent states
// of its linear-attention layers.
type Seq struct {
	Layers    []Layer
	Recurrent []*Recurrent
}

// stateful reports whether the sequence can only resume from a snapshot: it has a
// sliding-window layer or a recurrent state, whose contents at a position are not the
// concatenation of blocks.
func (s Seq) stateful() bool {
	if len(s.Recurrent) > 0 {
		return true
	}
	for _, l := range s.Layers {
		if _, ok := l.(*Rotating); ok {
			return true
		}
	}
	return false
}

func (s Seq) len() int {
	for _, l := range s.Layers {
		if l != nil {
			return l.Len()
		}
	}
	if len(s.Recurrent) > 0 {
		return s.Recurrent[0].Len()
	}
	return 0
}

// NewModelKey derives the model key of a sequence's caches for the checkpoint known as
// identity (CheckpointIdentity). It fails for caches the prefix cache cannot share: a
// float32 reference cache or an unknown kind.
func NewModelKey(identity string, s Seq) (ModelKey, error) {
	h := sha256.New()
	fmt.Fprintf(h, "mlxg prefix v%d\n%s\n", PrefixFormatVersion, identity)
	for i, l := range s.Layers {
		d, ok := describeLayer(l)
		if !ok {
			return ModelKey{}, fmt.Errorf("kvstore: layer %d's cache (%T) cannot be shared by the prefix cache", i, l)
		}
		fmt.Fprintf(h, "%d %s\n", i, d)
	}
	for i, r := range s.Recurrent {
		fmt.Fprintf(h, "state %d %v\n", i, r.sizes)
	}
	var k ModelKey
	h.Sum(k[:0])
	return k, nil
}

var hexDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)

// CheckpointIdentity names a checkpoint's weights cheaply: for each weight and config file,
// its name and, when it is a link into a Hugging Face cache's blobs (named by their
// SHA256), the blob's name, else its size and a digest of 16 evenly spaced 64 KiB samples
// of its contents (a fine-tune of the same shapes differs in every sample).
func CheckpointIdentity(dir string) (string, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return "", err
	}
	if len(names) == 0 {
		return "", fmt.Errorf("kvstore: %s holds no *.safetensors files", dir)
	}
	names = append(names, filepath.Join(dir, "config.json"))
	sort.Strings(names)
	h := sha256.New()
	for _, name := range names {
		fmt.Fprintf(h, "%s\n", filepath.Base(name))
		if target, err := os.Readlink(name); err == nil && hexDigest.MatchString(filepath.Base(target)) {
			fmt.Fprintf(h, "blob %s\n", filepath.Base(target))
			continue
		}
		if err := sampleDigest(h, name); err != nil {
			return "", fmt.Errorf("kvstore: identifying the checkpoint %s: %w", dir, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func sampleDigest(w io.Writer, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	fmt.Fprintf(w, "size %d\n", size)
	const samples, chunk = 16, 64 << 10
	buf := make([]byte, chunk)
	for i := int64(0); i < samples; i++ {
		off := size * i / samples
		n, err := f.ReadAt(buf[:min(chunk, size-off)], off)
		if err != nil && err != io.EOF {
			return err
		}
		w.Write(buf[:n])
	}
	return nil
}

// Block is one immutable prefix block: the tokens of one 256-token block of a sequence
// (fewer for a prefix that ends mid-block), every full-attention layer's page of keys and
// values, and, when it carries a state, the sliding-window snapshots and recurrent states
// at its end, from which a sequence can resume.
type Block struct {
	Hash, Parent Hash
	Key          ModelKey
	Pos          int // position of the first token
	Tokens       []int32
	pages        []*page // per layer; nil for layers without pages
	rings        []*ring // per layer, when stateful: nil for layers without a snapshot
	states       [][][]float32
	stateful     bool // carries rings and states: a sequence may resume at its end

	size   int64
	refs   int
	elem   *list.Element
	onDisk bool
	// preloaded: read from the SSD tier at start-up and not used by a request since; its first
	// use counts as an SSD hit, not a RAM hit.
	preloaded bool
}

// Bytes is the memory the block's pages and snapshots hold.
func (b *Block) Bytes() int64 { return b.size }

// End is the position after the block's last token.
func (b *Block) End() int { return b.Pos + len(b.Tokens) }

func (b *Block) computeSize() {
	b.size = 4 * int64(len(b.Tokens))
	for _, p := range b.pages {
		if p != nil {
			b.size += p.bytes()
		}
	}
	for _, r := range b.rings {
		if r != nil {
			b.size += r.bytes()
		}
	}
	for _, s := range b.states {
		for _, t := range s {
			b.size += 4 * int64(len(t))
		}
	}
}

// PrefixConfig configures a PrefixCache.
type PrefixConfig struct {
	// Budget is the RAM tier's size in bytes; 0: unbounded until SetBudget (the memory
	// policy's PrefixBudget, set when a model loads).
	Budget int64
	// Dir holds the SSD tier; "" keeps the cache in RAM only.
	Dir string
	// MaxDiskBytes caps the SSD tier; 0: no cap.
	MaxDiskBytes int64
	// Hot is how many of the most recently used SSD blocks are loaded into RAM at start-up.
	Hot int
	Log *slog.Logger // nil: slog.Default()
}

// PrefixStats are a PrefixCache's counters since it opened, and its tiers' sizes.
type PrefixStats struct {
	RAMBlocks, RAMBytes   int64
	DiskBlocks, DiskBytes int64
	RAMHits, DiskHits     int64 // blocks reused from each tier
	Misses                int64 // restores that found no usable block
	Lookups               int64 // restores
	DiskRead, DiskWritten int64 // bytes
	BlocksWritten         int64
	RAMEvictions          int64
	DiskEvictions         int64
	DiskRejected          int64 // blocks that failed verification, deleted
	DiskFull              bool
}

// PrefixCache holds prefix blocks in RAM, shared by reference between sequences and
// evicted least-recently-used under a byte budget, over an optional SSD tier. Safe for
// concurrent use.
type PrefixCache struct {
	log  *slog.Logger
	disk *diskTier

	mu       sync.Mutex
	blocks   map[Hash]*Block
	partials map[partialKey][]*Block // blocks of fewer than BlockTokens tokens, by parent
	models   map[ModelKey]int        // blocks per model key, for chain_break
	lru      *list.List              // front: most recently used
	bytes    int64
	budget   int64
	st       PrefixStats
}

type partialKey struct {
	key    ModelKey
	parent Hash
}

// NewPrefixCache opens a prefix cache. With a Dir it opens the SSD tier (creating the
// directory, removing temporary files left by a killed writer) and starts loading the
// Hot most recent blocks in the background.
func NewPrefixCache(cfg PrefixConfig) (*PrefixCache, error) {
	p := &PrefixCache{log: cfg.Log, blocks: map[Hash]*Block{}, partials: map[partialKey][]*Block{},
		models: map[ModelKey]int{}, lru: list.New(), budget: cfg.Budget}
	if p.log == nil {
		p.log = slog.Default()
	}
	if cfg.Dir != "" {
		d, err := openDisk(cfg.Dir, cfg.MaxDiskBytes, p)
		if err != nil {
			return nil, err
		}
		p.disk = d
		if cfg.Hot > 0 {
			d.wg.Go(func() { d.loadHot(cfg.Hot) })
		}
	}
	return p, nil
}

// Close waits for the SSD writer to finish the blocks queued so far.
func (p *PrefixCache) Close() error {
	if p.disk != nil {
		p.disk.close()
	}
	return nil
}

// Flush waits until every block queued for the SSD tier is written (tests, benchmarks).
func (p *PrefixCache) Flush() {
	if p.disk != nil {
		p.disk.flush()
	}
}

// Dir is the SSD tier's directory, "" without one.
func (p *PrefixCache) Dir() string {
	if p.disk == nil {
		return ""
	}
	return p.disk.dir
}

// SetBudget sets the RAM tier's byte budget and evicts down to it.
func (p *PrefixCache) SetBudget(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.budget = max(n, 0)
	if n == 0 {
		p.budget = -1 // a zero budget from the policy (critical pressure) keeps nothing
	}
	p.evictLocked()
}

// Stats returns the counters and the tiers' sizes.
func (p *PrefixCache) Stats() PrefixStats {
	p.mu.Lock()
	st := p.st
	st.RAMBlocks, st.RAMBytes = int64(len(p.blocks)), p.bytes
	for _, bs := range p.partials {
		st.RAMBlocks += int64(len(bs))
	}
	p.mu.Unlock()
	if p.disk != nil {
		st.DiskBlocks, st.DiskBytes, st.DiskFull = p.disk.size()
	}
	return st
}

// ClearRAM drops every RAM block no sequence holds and returns how many went.
func (p *PrefixCache) ClearRAM() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for e := p.lru.Back(); e != nil; {
		prev := e.Prev()
		if b := e.Value.(*Block); b.refs == 0 {
			p.removeLocked(b)
			n++
		}
		e = prev
	}
	return n
}

// lookupLocked returns the RAM block named h, marking it used.
func (p *PrefixCache) lookupLocked(h Hash) *Block {
	b := p.blocks[h]
	if b != nil {
		p.lru.MoveToFront(b.elem)
	}
	return b
}

// partialLocked returns the longest RAM partial block after parent whose tokens start rest.
func (p *PrefixCache) partialLocked(key ModelKey, parent Hash, rest []int32, needState bool) *Block {
	var best *Block
	for _, b := range p.partials[partialKey{key, parent}] {
		if len(b.Tokens) <= len(rest) && (best == nil || len(b.Tokens) > len(best.Tokens)) &&
			(b.stateful || !needState) && slices.Equal(b.Tokens, rest[:len(b.Tokens)]) {
			best = b
		}
	}
	if best != nil {
		p.lru.MoveToFront(best.elem)
	}
	return best
}

// insertLocked adds b, or returns the block already there under its hash (to which b's
// snapshots are added when it has none).
func (p *PrefixCache) insertLocked(b *Block) *Block {
	if old := p.blocks[b.Hash]; old != nil {
		p.upgradeLocked(old, b)
		return old
	}
	if len(b.Tokens) < BlockTokens {
		k := partialKey{b.Key, b.Parent}
		for _, old := range p.partials[k] {
			if old.Hash == b.Hash {
				p.upgradeLocked(old, b)
				return old
			}
		}
		p.partials[k] = append(p.partials[k], b)
	} else {
		p.blocks[b.Hash] = b
	}
	b.computeSize()
	b.elem = p.lru.PushFront(b)
	p.bytes += b.size
	p.models[b.Key]++
	p.evictLocked()
	return b
}

func (p *PrefixCache) upgradeLocked(old, b *Block) {
	p.lru.MoveToFront(old.elem)
	if old.stateful || !b.stateful {
		return
	}
	p.bytes -= old.size
	old.rings, old.states, old.stateful, old.onDisk = b.rings, b.states, true, false
	old.computeSize()
	p.bytes += old.size
}

func (p *PrefixCache) removeLocked(b *Block) {
	if len(b.Tokens) < BlockTokens {
		k := partialKey{b.Key, b.Parent}
		p.partials[k] = slices.DeleteFunc(p.partials[k], func(x *Block) bool { return x == b })
		if len(p.partials[k]) == 0 {
			delete(p.partials, k)
		}
	} else {
		delete(p.blocks, b.Hash)
	}
	p.lru.Remove(b.elem)
	p.bytes -= b.size
	if p.models[b.Key]--; p.models[b.Key] <= 0 {
		delete(p.models, b.Key)
	}
}

// evictLocked drops unreferenced blocks, least recently used first, until the tier fits its budget.
func (p *PrefixCache) evictLocked() {
	if p.budget == 0 {
		return
	}
	limit := max(p.budget, 0)
	for e := p.lru.Back(); e != nil && p.bytes > limit; {
		prev := e.Prev()
		if b := e.Value.(*Block); b.refs == 0 {
			p.removeLocked(b)
			p.st.RAMEvictions++
		}
		e = prev
	}
}

// RequestStats say what one request got from the prefix cache (its PERF keys).
type RequestStats struct {
	Cached     int  // prompt tokens restored from the cache
	Prefilled  int  // prompt tokens computed
	RAMHits    int  // blocks reused from RAM
	DiskHits   int  // blocks that came from SSD: read for this request, or preloaded at start-up and first used now
	Preloaded  int  // of DiskHits, the blocks preloaded at start-up (read before the request)
	Written    int  // blocks queued for the SSD tier
	ChainBreak bool // the prompt's first block matched nothing while the cache holds blocks of this model
}

// Perf returns the PERF line's keys and values.
func (r RequestStats) Perf() []any {
	cb := 0
	if r.ChainBreak {
		cb = 1
	}
	return []any{"cached_tok", r.Cached, "pref_tok", r.Prefilled, "ram_hit", r.RAMHits, "block_hit", r.DiskHits,
		"block_write", r.Written, "chain_break", cb, "block_preload", r.Preloaded}
}

// Session is one sequence's use of the prefix cache: Restore before prefill, Save after
// it (and at the end), End when the sequence is done. It holds references to the blocks
// the sequence uses, so they are not evicted under it. Not safe for concurrent use.
type Session struct {
	p     *PrefixCache
	key   ModelKey
	seq   Seq
	held  map[*Block]bool
	fresh []*Block
	Stats RequestStats
}

// Begin starts a session for a sequence whose caches have the model key key.
func (p *PrefixCache) Begin(key ModelKey, s Seq) *Session {
	return &Session{p: p, key: key, seq: s, held: map[*Block]bool{}}
}

// holdLocked takes a reference to b for the session.
func (s *Session) holdLocked(b *Block) {
	if !s.held[b] {
		s.held[b] = true
		b.refs++
	}
}

// Restore fills the session's empty caches with the longest cached prefix of tokens it
// can resume from and returns its length; the caller prefills the rest. A sequence with
// sliding-window layers or a recurrent state resumes only at a block that carries a
// snapshot. Blocks missing from RAM are read from the SSD tier together, verified, and
// promoted to RAM; a block that fails verification ends the prefix there.
func (s *Session) Restore(tokens []int32) int {
	p := s.p
	need := s.seq.stateful()
	var chain []*Block
	var wanted []diskWant // SSD blocks to read, by position in chain
	parent := Hash{}
	p.mu.Lock()
	p.st.Lookups++
	known := p.models[s.key] > 0
	for i := 0; (i+1)*BlockTokens <= len(tokens); i++ {
		t := tokens[i*BlockTokens : (i+1)*BlockTokens]
		h := ChainHash(parent, s.key, t)
		if b := p.lookupLocked(h); b != nil {
			chain = append(chain, b)
		} else if p.disk != nil && p.disk.has(s.key, parent, h, len(t), need) {
			wanted = append(wanted, diskWant{at: len(chain), key: s.key, parent: parent, hash: h, pos: i * BlockTokens, tokens: t})
			chain = append(chain, nil)
		} else {
			break
		}
		parent = h
	}
	rest := tokens[len(chain)*BlockTokens:]
	if len(rest) > 0 {
		if b := p.partialLocked(s.key, parent, rest, need); b != nil {
			chain = append(chain, b)
		} else if p.disk != nil {
			if w, ok := p.disk.partial(s.key, parent, rest, need); ok {
				w.at, w.pos = len(chain), len(chain)*BlockTokens
				wanted = append(wanted, w)
				chain = append(chain, nil)
			}
		}
	}
	for _, b := range chain {
		if b != nil {
			s.holdLocked(b) // not evicted while the SSD blocks load
		}
	}
	p.mu.Unlock()

	fromDisk := map[*Block]bool{}
	if len(wanted) > 0 {
		loaded := p.disk.readAll(wanted)
		p.mu.Lock()
		for i, w := range wanted {
			b := loaded[i]
			if b == nil {
				chain = chain[:w.at] // missing or failed verification: the prefix ends before it
				break
			}
			b = p.insertLocked(b)
			s.holdLocked(b)
			chain[w.at] = b
			fromDisk[b] = true
		}
		p.mu.Unlock()
	}
	// Resume at the last block that carries what the sequence needs.
	end := len(chain)
	if need {
		for end > 0 && !chain[end-1].stateful {
			end--
		}
	}
	chain = chain[:end]
	if len(chain) > 0 {
		if err := s.restore(chain); err != nil {
			p.log.Warn("prefix cache: restoring a cached prefix failed; computing it", "tokens", chain[len(chain)-1].End(), "error", err)
			s.reset()
			chain = nil
		}
	}
	n := 0
	if len(chain) > 0 {
		n = chain[len(chain)-1].End()
	}
	p.mu.Lock()
	for _, b := range chain {
		switch {
		case fromDisk[b]:
			s.Stats.DiskHits++
		case b.preloaded: // read from SSD at start-up: this request is the first to use it
			b.preloaded = false
			s.Stats.DiskHits++
			s.Stats.Preloaded++
		default:
			s.Stats.RAMHits++
		}
	}
	if n == 0 {
		p.st.Misses++
	}
	p.st.RAMHits += int64(s.Stats.RAMHits)
	p.st.DiskHits += int64(s.Stats.DiskHits)
	s.Stats.ChainBreak = known && len(tokens) >= BlockTokens && (len(chain) == 0 || len(chain[0].Tokens) < BlockTokens)
	p.mu.Unlock()
	s.Stats.Cached = n
	return n
}

// restore imports chain into the session's caches.
func (s *Session) restore(chain []*Block) error {
	last := chain[len(chain)-1]
	for i, l := range s.seq.Layers {
		switch c := l.(type) {
		case nil:
		case *Rotating:
			if i >= len(last.rings) || last.rings[i] == nil {
				return fmt.Errorf("layer %d: the block at %d carries no sliding-window snapshot", i, last.Pos)
			}
			if err := c.importRing(last.rings[i]); err != nil {
				return fmt.Errorf("layer %d: %w", i, err)
			}
		case pageSharer:
			ps := make([]*page, len(chain))
			for j, b := range chain {
				if i >= len(b.pages) || b.pages[i] == nil {
					return fmt.Errorf("layer %d: the block at %d has no page for it", i, b.Pos)
				}
				ps[j] = b.pages[i]
			}
			if err := c.importPages(ps); err != nil {
				return fmt.Errorf("layer %d: %w", i, err)
			}
		default:
			return fmt.Errorf("layer %d: %T cannot be restored", i, l)
		}
	}
	if len(s.seq.Recurrent) > 0 {
		if len(last.states) != len(s.seq.Recurrent) {
			return fmt.Errorf("the block at %d carries %d recurrent states, the model has %d", last.Pos, len(last.states), len(s.seq.Recurrent))
		}
		for i, r := range s.seq.Recurrent {
			if err := r.importState(last.states[i], last.End()); err != nil {
				return err
			}
		}
	}
	return nil
}

// reset empties the session's caches after a failed restore.
func (s *Session) reset() {
	for _, l := range s.seq.Layers {
		if l == nil {
			continue
		}
		switch c := l.(type) {
		case *Rotating: // as made: a converted cache does not go back to fp16 by truncation
			k, _ := newKVCodecs(c.kvHeads, c.kDim, c.vDim, c.spec, c.start)
			*c = Rotating{kvCodecs: k, window: c.window}
		case *Quantized:
			k, _ := newKVCodecs(c.kvHeads, c.kDim, c.vDim, c.spec, c.start)
			*c = Quantized{kvCodecs: k}
		default:
			l.Truncate(0)
		}
	}
	for _, r := range s.seq.Recurrent {
		r.Truncate(0)
	}
}

// pageSharer is a full-attention kind that shares pages.
type pageSharer interface {
	exportPage(b int) (*page, bool)
	importPages(ps []*page) error
}

// Save stores the blocks of tokens, which must be exactly what the session's caches hold:
// every full block by reference, and the last partial block (a prefix that ends
// mid-block: the end of a prompt or of a turn) as a copy. The block at the end carries the
// sliding-window snapshots and recurrent states, so a later sequence can resume there.
func (s *Session) Save(tokens []int32) {
	if len(tokens) == 0 || len(tokens) != s.seq.len() {
		return
	}
	p := s.p
	parent := Hash{}
	full := len(tokens) / BlockTokens
	for i := 0; i*BlockTokens < len(tokens); i++ {
		t := tokens[i*BlockTokens : min((i+1)*BlockTokens, len(tokens))]
		h := ChainHash(parent, s.key, t)
		atEnd := (i+1)*BlockTokens >= len(tokens)
		p.mu.Lock()
		var b *Block
		if i < full {
			b = p.lookupLocked(h)
		} else {
			b = p.partialLocked(s.key, parent, t, false)
			if b != nil && b.Hash != h {
				b = nil
			}
		}
		p.mu.Unlock()
		if b == nil || atEnd && !b.stateful && s.seq.stateful() {
			nb, ok := s.export(i, parent, h, t, atEnd)
			if !ok {
				return
			}
			p.mu.Lock()
			b = p.insertLocked(nb)
			p.mu.Unlock()
		}
		p.mu.Lock()
		s.holdLocked(b)
		if !b.onDisk && !slices.Contains(s.fresh, b) {
			s.fresh = append(s.fresh, b)
		}
		p.mu.Unlock()
		parent = h
	}
}

// export makes the block of tokens t at block index i from the session's caches.
func (s *Session) export(i int, parent, h Hash, t []int32, atEnd bool) (*Block, bool) {
	b := &Block{Hash: h, Parent: parent, Key: s.key, Pos: i * BlockTokens, Tokens: slices.Clone(t),
		pages: make([]*page, len(s.seq.Layers))}
	for j, l := range s.seq.Layers {
		if ps, ok := l.(pageSharer); ok {
			pg, ok := ps.exportPage(i)
			if !ok {
				return nil, false
			}
			b.pages[j] = pg
		}
	}
	if atEnd && s.seq.stateful() {
		b.stateful = true
		b.rings = make([]*ring, len(s.seq.Layers))
		for j, l := range s.seq.Layers {
			if r, ok := l.(*Rotating); ok {
				b.rings[j] = r.exportRing()
			}
		}
		for _, r := range s.seq.Recurrent {
			b.states = append(b.states, r.exportState())
		}
	}
	return b, true
}

// End releases the session's blocks and queues those not yet on SSD for the background
// writer; Stats.Written counts them.
func (s *Session) End() {
	p := s.p
	p.mu.Lock()
	for b := range s.held {
		b.refs--
	}
	s.held = nil
	p.evictLocked()
	p.mu.Unlock()
	if p.disk != nil && len(s.fresh) > 0 {
		s.Stats.Written = p.disk.enqueue(s.fresh)
	}
	s.fresh = nil
}

// stringsJoinInts spells ids as "1,2,3" for file metadata.
func stringsJoinInts(ids []int32) string {
	var b strings.Builder
	for i, t := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, t)
	}
	return b.String()
}
