package kvstore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gofrs/flock"

	"github.com/mlxg/mlxg/registry/safetensors"
)

// The SSD tier: one safetensors file per block, in a folder per model key,
//
//	<dir>/<model key>/<parent hash>-<token count>-<hash>[-s].safetensors
//
// ("-s": the block carries sliding-window snapshots and recurrent states), holding every
// layer's codes and fp16 halves (scales and biases, or fp16 data) and metadata: format
// version, model key, hash, parent, position, token ids, the per-layer spec and a SHA256
// checksum of the data. Files are written by safetensors.Write (temp file, fsync, rename),
// so a killed writer leaves at most a temporary file, removed at the next start; least
// recently used means the oldest modification time (a read touches the file). A file that
// fails verification is deleted. Two servers may share the folder: writes are atomic
// renames of identical contents; a writer holds a shared flock on <dir>/.lock while it
// writes a block, and start-up clean-up, eviction and clear hold it exclusively, so a
// temporary file found under the exclusive lock belongs to a dead writer.

const (
	blockFormat = "mlxg-prefix-block"
	blockExt    = ".safetensors"
	lockName    = ".lock"
)

type diskTier struct {
	dir      string
	maxBytes int64
	p        *PrefixCache
	log      *slog.Logger
	lock     *flock.Flock // exclusive: clean-up and eviction
	wlock    *flock.Flock // shared, around each write
	write    func(path string, tensors []safetensors.Tensor, meta map[string]string) error

	mu      sync.Mutex
	idle    *sync.Cond
	queue   []*Block
	busy    bool
	full    bool
	blocks  int64
	bytes   int64
	written int64
	wg      sync.WaitGroup
}

func openDisk(dir string, maxBytes int64, p *PrefixCache) (*diskTier, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("prefix cache: creating %s: %w (set --block-ssd-cache-dir or MLXG_PREFIX_DIR to a writable folder)", dir, err)
	}
	d := &diskTier{dir: dir, maxBytes: maxBytes, p: p, log: p.log, lock: flock.New(filepath.Join(dir, lockName)),
		wlock: flock.New(filepath.Join(dir, lockName)), write: safetensors.Write}
	d.idle = sync.NewCond(&d.mu)
	if err := d.scan(true); err != nil {
		return nil, err
	}
	return d, nil
}

// diskFile is one block file found in the folder.
type diskFile struct {
	path     string
	key      ModelKey
	parent   Hash
	n        int
	hash     Hash
	stateful bool
	size     int64
	mod      time.Time
}

// parseName reads <parent>-<n>-<hash>[-s].safetensors.
func parseName(name string) (f diskFile, ok bool) {
	base, found := strings.CutSuffix(name, blockExt)
	if !found || strings.HasPrefix(base, ".") {
		return f, false
	}
	base, f.stateful = strings.CutSuffix(base, "-s")
	parts := strings.Split(base, "-")
	if len(parts) != 3 {
		return f, false
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n <= 0 || n > BlockTokens || !decodeHash(parts[0], (*[32]byte)(&f.parent)) || !decodeHash(parts[2], (*[32]byte)(&f.hash)) {
		return f, false
	}
	f.n = n
	return f, true
}

func decodeHash(s string, out *[32]byte) bool {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		return false
	}
	copy(out[:], b)
	return true
}

func blockName(parent Hash, n int, h Hash, stateful bool) string {
	s := ""
	if stateful {
		s = "-s"
	}
	return fmt.Sprintf("%s-%d-%s%s%s", parent, n, h, s, blockExt)
}

func (d *diskTier) path(key ModelKey, parent Hash, n int, h Hash, stateful bool) string {
	return filepath.Join(d.dir, key.String(), blockName(parent, n, h, stateful))
}

// listFiles returns every block file under dir; with clean, whose caller holds the
// exclusive lock, it also removes temporary files (a killed writer's).
func listFiles(dir string, clean bool) ([]diskFile, error) {
	subs, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []diskFile
	for _, sub := range subs {
		var key ModelKey
		if !sub.IsDir() || !decodeHash(sub.Name(), (*[32]byte)(&key)) {
			continue
		}
		entries, err := os.ReadDir(filepath.Join(dir, sub.Name()))
		if err != nil {
			continue
		}
		for _, e := range entries {
			path := filepath.Join(dir, sub.Name(), e.Name())
			info, err := e.Info()
			if err != nil {
				continue
			}
			if strings.HasPrefix(e.Name(), ".") && strings.Contains(e.Name(), ".tmp-") {
				if clean {
					os.Remove(path)
				}
				continue
			}
			f, ok := parseName(e.Name())
			if !ok {
				continue
			}
			f.path, f.key, f.size, f.mod = path, key, info.Size(), info.ModTime()
			out = append(out, f)
		}
	}
	return out, nil
}

// scan recounts the tier; with clean it also removes stale temporary files.
func (d *diskTier) scan(clean bool) error {
	if err := d.lock.Lock(); err != nil {
		return fmt.Errorf("prefix cache: locking %s: %w", d.dir, err)
	}
	defer d.lock.Unlock()
	files, err := listFiles(d.dir, clean)
	if err != nil {
		return fmt.Errorf("prefix cache: reading %s: %w", d.dir, err)
	}
	var bytes int64
	for _, f := range files {
		bytes += f.size
	}
	d.mu.Lock()
	d.blocks, d.bytes = int64(len(files)), bytes
	d.mu.Unlock()
	return nil
}

func (d *diskTier) size() (int64, int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.blocks, d.bytes, d.full
}

// diskWant is a block the chain walk expects on SSD.
type diskWant struct {
	at       int // index in the chain
	key      ModelKey
	parent   Hash
	hash     Hash
	pos      int
	tokens   []int32
	stateful bool
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// has reports whether the full block h after parent is on SSD.
func (d *diskTier) has(key ModelKey, parent, h Hash, n int, _ bool) bool {
	return exists(d.path(key, parent, n, h, true)) || exists(d.path(key, parent, n, h, false))
}

// partial finds the longest partial block after parent whose tokens start rest.
func (d *diskTier) partial(key ModelKey, parent Hash, rest []int32, needState bool) (diskWant, bool) {
	matches, _ := filepath.Glob(filepath.Join(d.dir, key.String(), parent.String()+"-*"+blockExt))
	var best diskWant
	found := false
	for _, m := range matches {
		f, ok := parseName(filepath.Base(m))
		if !ok || f.n >= BlockTokens || f.n > len(rest) || needState && !f.stateful || found && f.n <= len(best.tokens) {
			continue
		}
		if ChainHash(parent, key, rest[:f.n]) == f.hash {
			best, found = diskWant{key: key, parent: parent, hash: f.hash, tokens: rest[:f.n], stateful: f.stateful}, true
		}
	}
	return best, found
}

// readAll reads the wanted blocks together (a few at a time in parallel), verifying each
// against what the chain expects; a missing or bad one comes back nil.
func (d *diskTier) readAll(wanted []diskWant) []*Block {
	out := make([]*Block, len(wanted))
	parallel(4, len(wanted), func(i int) {
		w := wanted[i]
		for _, st := range []bool{true, false} {
			path := d.path(w.key, w.parent, len(w.tokens), w.hash, st)
			if !exists(path) {
				continue
			}
			b, err := d.read(path, &w)
			if err != nil {
				d.reject(path, err)
				continue
			}
			out[i] = b
			return
		}
	})
	return out
}

// reject deletes a block file that failed verification.
func (d *diskTier) reject(path string, err error) {
	d.log.Warn("prefix cache: a block file failed verification; deleted, computing instead", "file", path, "error", err)
	if os.Remove(path) == nil {
		d.mu.Lock()
		d.blocks--
		d.mu.Unlock()
	}
	d.p.mu.Lock()
	d.p.st.DiskRejected++
	d.p.mu.Unlock()
}

// layerMeta is one layer's entry in a block file's "layers" metadata.
type layerMeta struct {
	Layer  int    `json:"layer"`
	Kind   string `json:"kind"` // "page" or "ring"
	K      Format `json:"k"`
	V      Format `json:"v"`
	Heads  int    `json:"heads"`
	KDim   int    `json:"kdim"`
	VDim   int    `json:"vdim"`
	Rows   int    `json:"rows"`
	Window int    `json:"window,omitempty"`
	N      int    `json:"n,omitempty"`
}

func u32Bytes(v []uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

func u16Bytes(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// encodeBlock lays b out as safetensors tensors and metadata.
func encodeBlock(b *Block) ([]safetensors.Tensor, map[string]string) {
	var ts []safetensors.Tensor
	var metas []layerMeta
	var specs []string
	addSeg := func(name string, s seg, rows int) {
		if len(s.codes) > 0 {
			ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name + ".codes", DType: "U32", Shape: []int{rows, len(s.codes) / rows}}, Data: u32Bytes(s.codes)})
		}
		ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name + ".halfs", DType: "F16", Shape: []int{rows, len(s.halfs) / rows}}, Data: u16Bytes(s.halfs)})
	}
	for i, p := range b.pages {
		if p == nil {
			continue
		}
		rows := p.rows * p.kvHeads
		addSeg(fmt.Sprintf("l%d.k", i), p.k, rows)
		addSeg(fmt.Sprintf("l%d.v", i), p.v, rows)
		metas = append(metas, layerMeta{Layer: i, Kind: "page", K: p.kf, V: p.vf, Heads: p.kvHeads, KDim: p.kDim, VDim: p.vDim, Rows: p.rows})
		specs = append(specs, fmt.Sprintf("%d:%s", i, Spec{K: p.kf, V: p.vf}))
	}
	for i, r := range b.rings {
		if r == nil {
			continue
		}
		if r.rows > 0 {
			addSeg(fmt.Sprintf("r%d.k", i), r.k, r.rows*r.kvHeads)
			addSeg(fmt.Sprintf("r%d.v", i), r.v, r.rows*r.kvHeads)
		}
		metas = append(metas, layerMeta{Layer: i, Kind: "ring", K: r.kf, V: r.vf, Heads: r.kvHeads, KDim: r.kDim, VDim: r.vDim, Rows: r.rows, Window: r.window, N: r.n})
		specs = append(specs, fmt.Sprintf("%d:%s w%d", i, Spec{K: r.kf, V: r.vf}, r.window))
	}
	var sizes [][]int
	for i, s := range b.states {
		var sz []int
		for j, t := range s {
			ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: fmt.Sprintf("s%d.%d", i, j), DType: "F32", Shape: []int{len(t)}}, Data: f32Bytes(t)})
			sz = append(sz, len(t))
		}
		sizes = append(sizes, sz)
	}
	sum := sha256.New()
	for _, t := range ts {
		sum.Write(t.Data)
	}
	lm, _ := json.Marshal(metas)
	sm, _ := json.Marshal(sizes)
	stateful := "0"
	if b.stateful {
		stateful = "1"
	}
	meta := map[string]string{
		"format": blockFormat, "version": strconv.Itoa(PrefixFormatVersion), "model_key": b.Key.String(),
		"hash": b.Hash.String(), "parent": b.Parent.String(), "pos": strconv.Itoa(b.Pos), "tokens": stringsJoinInts(b.Tokens),
		"stateful": stateful, "layers": string(lm), "states": string(sm), "spec": strings.Join(specs, ","),
		"checksum": hex.EncodeToString(sum.Sum(nil)),
	}
	return ts, meta
}

// read opens and verifies a block file. With a want, its metadata must also equal what
// the chain expects; without one (hot loading, VerifyDisk) it must be self-consistent.
func (d *diskTier) read(path string, w *diskWant) (*Block, error) {
	b, size, err := readBlockFile(path)
	if err != nil {
		return nil, err
	}
	if w != nil && (b.Key != w.key || b.Parent != w.parent || b.Hash != w.hash || !slices.Equal(b.Tokens, w.tokens) || b.Pos != w.pos) {
		return nil, fmt.Errorf("its metadata names another block than the chain expects (position %d)", w.pos)
	}
	now := time.Now()
	os.Chtimes(path, now, now) // least recently used is the oldest
	b.onDisk = true
	d.p.mu.Lock()
	d.p.st.DiskRead += size
	d.p.mu.Unlock()
	return b, nil
}

// readBlockFile reads and verifies a block file on its own: name, metadata, chain hash,
// checksum and every tensor's shape.
func readBlockFile(path string) (*Block, int64, error) {
	want, ok := parseName(filepath.Base(path))
	if !ok {
		return nil, 0, fmt.Errorf("not a block file name")
	}
	if !decodeHash(filepath.Base(filepath.Dir(path)), (*[32]byte)(&want.key)) {
		return nil, 0, fmt.Errorf("not in a model key folder")
	}
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	m := f.Header.Metadata
	if m["format"] != blockFormat || m["version"] != strconv.Itoa(PrefixFormatVersion) {
		return nil, 0, fmt.Errorf("format %q version %q, want %s version %d", m["format"], m["version"], blockFormat, PrefixFormatVersion)
	}
	b := &Block{stateful: m["stateful"] == "1"}
	if !decodeHash(m["model_key"], (*[32]byte)(&b.Key)) || !decodeHash(m["hash"], (*[32]byte)(&b.Hash)) || !decodeHash(m["parent"], (*[32]byte)(&b.Parent)) {
		return nil, 0, fmt.Errorf("bad hashes in the metadata")
	}
	if b.Pos, err = strconv.Atoi(m["pos"]); err != nil || b.Pos < 0 || b.Pos%BlockTokens != 0 {
		return nil, 0, fmt.Errorf("bad position %q", m["pos"])
	}
	for _, s := range strings.Split(m["tokens"], ",") {
		t, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return nil, 0, fmt.Errorf("bad token ids")
		}
		b.Tokens = append(b.Tokens, int32(t))
	}
	if b.Key != want.key || b.Parent != want.parent || b.Hash != want.hash || len(b.Tokens) != want.n || b.stateful != want.stateful {
		return nil, 0, fmt.Errorf("the metadata does not match the file's name")
	}
	if ChainHash(b.Parent, b.Key, b.Tokens) != b.Hash {
		return nil, 0, fmt.Errorf("the chain hash of its parent, model key and tokens is not its name")
	}
	sum := sha256.New()
	var size int64
	for _, t := range f.Header.Tensors {
		tt, _ := f.Tensor(t.Name)
		sum.Write(tt.Data)
		size += int64(len(tt.Data))
	}
	if hex.EncodeToString(sum.Sum(nil)) != m["checksum"] {
		return nil, 0, fmt.Errorf("checksum mismatch")
	}
	var metas []layerMeta
	var sizes [][]int
	if json.Unmarshal([]byte(m["layers"]), &metas) != nil || json.Unmarshal([]byte(m["states"]), &sizes) != nil {
		return nil, 0, fmt.Errorf("bad layer metadata")
	}
	used := 0
	getSeg := func(name string, f16 Format, dim, rows int) (seg, error) {
		c := newRowCodec(f16, dim)
		var s seg
		if c.words > 0 {
			data, err := tensorData(f, name+".codes", "U32", rows*c.words*4)
			if err != nil {
				return s, err
			}
			s.codes = blockSlice[uint32](rows * c.words)
			for i := range s.codes {
				s.codes[i] = binary.LittleEndian.Uint32(data[4*i:])
			}
			used++
		}
		data, err := tensorData(f, name+".halfs", "F16", rows*c.halfs*2)
		if err != nil {
			return s, err
		}
		s.halfs = blockSlice[uint16](rows * c.halfs)
		for i := range s.halfs {
			s.halfs[i] = binary.LittleEndian.Uint16(data[2*i:])
		}
		used++
		return s, nil
	}
	for _, lm := range metas {
		if lm.Layer < 0 || lm.Layer > 4096 || lm.Heads <= 0 || lm.Rows < 0 || lm.Rows > max(BlockTokens, lm.Window) {
			return nil, 0, fmt.Errorf("bad layer metadata")
		}
		if err := (Spec{K: lm.K, V: lm.V}).Validate(lm.KDim, lm.VDim); err != nil || lm.KDim > maxHeadDim || lm.VDim > maxHeadDim {
			return nil, 0, fmt.Errorf("layer %d: bad spec", lm.Layer)
		}
		switch lm.Kind {
		case "page":
			if lm.Rows != len(b.Tokens) {
				return nil, 0, fmt.Errorf("layer %d: %d positions for %d tokens", lm.Layer, lm.Rows, len(b.Tokens))
			}
			p := &page{kf: lm.K, vf: lm.V, kvHeads: lm.Heads, kDim: lm.KDim, vDim: lm.VDim, rows: lm.Rows}
			if p.k, err = getSeg(fmt.Sprintf("l%d.k", lm.Layer), lm.K, lm.KDim, lm.Rows*lm.Heads); err != nil {
				return nil, 0, err
			}
			if p.v, err = getSeg(fmt.Sprintf("l%d.v", lm.Layer), lm.V, lm.VDim, lm.Rows*lm.Heads); err != nil {
				return nil, 0, err
			}
			for len(b.pages) <= lm.Layer {
				b.pages = append(b.pages, nil)
			}
			b.pages[lm.Layer] = p
		case "ring":
			if !b.stateful || lm.N != b.Pos+len(b.Tokens) {
				return nil, 0, fmt.Errorf("layer %d: a snapshot at %d in a block ending at %d", lm.Layer, lm.N, b.Pos+len(b.Tokens))
			}
			r := &ring{kf: lm.K, vf: lm.V, kvHeads: lm.Heads, kDim: lm.KDim, vDim: lm.VDim, rows: lm.Rows, window: lm.Window, n: lm.N}
			if lm.Rows > 0 {
				if r.k, err = getSeg(fmt.Sprintf("r%d.k", lm.Layer), lm.K, lm.KDim, lm.Rows*lm.Heads); err != nil {
					return nil, 0, err
				}
				if r.v, err = getSeg(fmt.Sprintf("r%d.v", lm.Layer), lm.V, lm.VDim, lm.Rows*lm.Heads); err != nil {
					return nil, 0, err
				}
			}
			for len(b.rings) <= lm.Layer {
				b.rings = append(b.rings, nil)
			}
			b.rings[lm.Layer] = r
		default:
			return nil, 0, fmt.Errorf("layer %d: unknown kind %q", lm.Layer, lm.Kind)
		}
	}
	for i, sz := range sizes {
		var st [][]float32
		for j, n := range sz {
			data, err := tensorData(f, fmt.Sprintf("s%d.%d", i, j), "F32", 4*n)
			if err != nil {
				return nil, 0, err
			}
			t := make([]float32, n)
			for k := range t {
				t[k] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*k:]))
			}
			st = append(st, t)
			used++
		}
		b.states = append(b.states, st)
	}
	if used != len(f.Header.Tensors) {
		return nil, 0, fmt.Errorf("%d tensors, the metadata describes %d", len(f.Header.Tensors), used)
	}
	if b.stateful && b.rings == nil {
		b.rings = []*ring{}
	}
	st, _ := os.Stat(path)
	if st != nil {
		size = st.Size()
	}
	return b, size, nil
}

func tensorData(f *safetensors.File, name string, dtype safetensors.DType, bytes int) ([]byte, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("tensor %s is missing", name)
	}
	if t.DType != dtype || len(t.Data) != bytes {
		return nil, fmt.Errorf("tensor %s is %s of %d bytes, want %s of %d", name, t.DType, len(t.Data), dtype, bytes)
	}
	return t.Data, nil
}

// enqueue hands blocks to the background writer and returns how many it will write.
func (d *diskTier) enqueue(bs []*Block) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.full {
		return 0
	}
	d.queue = append(d.queue, bs...)
	if !d.busy {
		d.busy = true
		d.wg.Go(d.drain)
	}
	return len(bs)
}

// drain writes queued blocks until none is left, then evicts down to the size cap.
func (d *diskTier) drain() {
	for {
		d.mu.Lock()
		if len(d.queue) == 0 || d.full {
			d.queue = nil
			d.mu.Unlock()
			break
		}
		b := d.queue[0]
		d.queue = d.queue[1:]
		d.mu.Unlock()
		d.writeBlock(b)
	}
	d.evict()
	d.mu.Lock()
	d.busy = false
	d.idle.Broadcast()
	d.mu.Unlock()
}

func (d *diskTier) writeBlock(b *Block) {
	d.p.mu.Lock()
	onDisk := b.onDisk
	d.p.mu.Unlock()
	if onDisk {
		return
	}
	path := d.path(b.Key, b.Parent, len(b.Tokens), b.Hash, b.stateful)
	if exists(path) { // another server (or an earlier run) wrote it
		d.p.mu.Lock()
		b.onDisk = true
		d.p.mu.Unlock()
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		d.writeFailed(path, err)
		return
	}
	ts, meta := encodeBlock(b)
	if err := d.wlock.RLock(); err != nil {
		d.writeFailed(path, err)
		return
	}
	err := d.write(path, ts, meta)
	d.wlock.Unlock()
	if err != nil {
		d.writeFailed(path, err)
		return
	}
	var size int64
	if st, err := os.Stat(path); err == nil {
		size = st.Size()
	}
	d.mu.Lock()
	d.blocks++
	d.bytes += size
	d.mu.Unlock()
	d.p.mu.Lock()
	b.onDisk = true
	d.p.st.BlocksWritten++
	d.p.st.DiskWritten += size
	d.p.mu.Unlock()
}

func (d *diskTier) writeFailed(path string, err error) {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		d.mu.Lock()
		first := !d.full
		d.full = true
		d.mu.Unlock()
		if first {
			d.log.Error("prefix cache: the disk is full; no more blocks are written to the SSD tier until restart (serving goes on)", "dir", d.dir, "error", err)
		}
		return
	}
	d.log.Warn("prefix cache: writing a block failed", "file", path, "error", err)
}

// evict deletes the least recently used block files until the tier fits its cap.
func (d *diskTier) evict() {
	d.mu.Lock()
	over := d.maxBytes > 0 && d.bytes > d.maxBytes
	d.mu.Unlock()
	if !over {
		return
	}
	if err := d.lock.Lock(); err != nil {
		d.log.Warn("prefix cache: cannot lock the SSD tier for eviction", "dir", d.dir, "error", err)
		return
	}
	defer d.lock.Unlock()
	files, err := listFiles(d.dir, false)
	if err != nil {
		return
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mod.Before(files[j].mod) })
	var total int64
	for _, f := range files {
		total += f.size
	}
	evicted := 0
	for _, f := range files {
		if total <= d.maxBytes {
			break
		}
		if err := os.Remove(f.path); err == nil || errors.Is(err, fs.ErrNotExist) {
			total -= f.size
			evicted++
		}
	}
	d.mu.Lock()
	d.blocks, d.bytes = int64(len(files)-evicted), total
	d.mu.Unlock()
	d.p.mu.Lock()
	d.p.st.DiskEvictions += int64(evicted)
	d.p.mu.Unlock()
}

// flush waits until the writer is idle.
func (d *diskTier) flush() {
	d.mu.Lock()
	for d.busy {
		d.idle.Wait()
	}
	d.mu.Unlock()
}

func (d *diskTier) close() {
	d.flush()
	d.wg.Wait()
}

// loadHot loads the n most recently used blocks into RAM.
func (d *diskTier) loadHot(n int) {
	files, err := listFiles(d.dir, false)
	if err != nil {
		return
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mod.After(files[j].mod) })
	loaded := 0
	for _, f := range files[:min(n, len(files))] {
		b, size, err := readBlockFile(f.path)
		if err != nil {
			d.reject(f.path, err)
			continue
		}
		b.onDisk, b.preloaded = true, true
		d.p.mu.Lock()
		d.p.st.DiskRead += size
		d.p.insertLocked(b)
		d.p.mu.Unlock()
		loaded++
	}
	if loaded > 0 {
		d.log.Info("prefix cache: loaded the most recent blocks from SSD", "blocks", loaded, "dir", d.dir)
	}
}

// DiskUsage describes an SSD tier's folder: block files, their bytes, and the oldest
// block's last use.
func DiskUsage(dir string) (blocks int, bytes int64, oldest time.Time, err error) {
	files, err := listFiles(dir, false)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, 0, time.Time{}, nil
		}
		return 0, 0, time.Time{}, err
	}
	for _, f := range files {
		bytes += f.size
		if oldest.IsZero() || f.mod.Before(oldest) {
			oldest = f.mod
		}
	}
	return len(files), bytes, oldest, nil
}

// ClearDisk deletes every block file (and stale temporary file) of an SSD tier's folder.
func ClearDisk(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	l := flock.New(filepath.Join(dir, lockName))
	if err := l.Lock(); err != nil {
		return fmt.Errorf("prefix cache: locking %s: %w", dir, err)
	}
	defer l.Unlock()
	files, err := listFiles(dir, true)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("prefix cache: %w", err)
		}
	}
	return nil
}

// VerifyDisk reads and verifies every block file of an SSD tier's folder, deleting the
// ones that fail (truncated, garbled, misnamed), and returns how many passed and failed.
func VerifyDisk(dir string, log *slog.Logger) (ok, removed int, err error) {
	if log == nil {
		log = slog.Default()
	}
	files, err := listFiles(dir, false)
	if err != nil {
		return 0, 0, err
	}
	for _, f := range files {
		if _, _, err := readBlockFile(f.path); err != nil {
			log.Warn("prefix cache: a block file failed verification; deleted", "file", f.path, "error", err)
			os.Remove(f.path)
			removed++
			continue
		}
		ok++
	}
	return ok, removed, nil
}
