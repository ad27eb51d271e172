package residency

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/mlxg/mlxg/registry/safetensors"
)

// Dense layers. A dense model's pass reads every layer once, in the same order, every
// token: a cyclic pattern, on which a recency or frequency cache of fewer units than
// the cycle misses every time (each unit is evicted just before it comes round again).
// The optimal cache for a cycle keeps a fixed set of units and streams the others
// through a small window, so the manager keeps the layers that fit in the budget
// (kept: never evicted while the budget holds them) and leaves room for two more, the
// one being computed and the one being read behind it. The streamed layers are
// spread evenly over the pass rather than bunched at its end: each is then read while
// the kept layers before it compute, so the reads overlap the whole pass instead of a
// part of it. Among streamed layers the one evicted is the one needed furthest ahead
// in the cycle (Belady's choice for a cycle), and a read-ahead evicts only layers
// needed later than the one it reads.

// layerWindow is how many streamed layers the budget leaves room for beside the kept
// ones: the layer being computed and the next one being read.
const layerWindow = 2

// AddLayers registers a dense model's layers, in the order a pass uses them, one unit
// per layer (its tensors' file ranges), and returns their ids. Call it once, before
// any use.
func (m *Manager) AddLayers(layers [][]Segment) ([]int, error) {
	if len(layers) == 0 {
		return nil, errors.New("residency: no layers")
	}
	m.mu.Lock()
	done := m.layers != nil
	m.mu.Unlock()
	if done {
		return nil, errors.New("residency: layers added twice")
	}
	ids := make([]int, len(layers))
	for i, segs := range layers {
		id, err := m.Add(segs)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, id := range ids {
		u := m.units[id]
		u.layer, u.pos = true, i
	}
	m.layers = ids
	m.keepLocked()
	m.evictLocked(0)
	return ids, nil
}

// Dense reports whether the manager's units are a dense model's layers.
func (m *Manager) Dense() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.layers != nil
}

// KeptLayers is how many layers the budget keeps in memory now, of all.
func (m *Manager) KeptLayers() (kept, layers int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range m.layers {
		if m.units[id].keep {
			kept++
		}
	}
	return kept, len(m.layers)
}

// KeepLayers chooses which of layers of the given sizes (in pass order) a budget of
// avail bytes keeps in memory: all when they fit, else as many as fit beside room for
// layerWindow of the largest, with the others spread evenly over the pass. keep[i]
// says layer i stays.
func KeepLayers(sizes []int64, avail int64) (keep []bool) {
	n := len(sizes)
	keep = make([]bool, n)
	var total, largest int64
	for _, s := range sizes {
		total += s
		largest = max(largest, s)
	}
	if total <= avail {
		for i := range keep {
			keep[i] = true
		}
		return keep
	}
	room := avail - layerWindow*largest
	for streamed := 1; streamed <= n; streamed++ {
		// Layer floor((k+1/2)·n/streamed) streams, for k < streamed: evenly spread.
		for i := range keep {
			keep[i] = true
		}
		for k := range streamed {
			keep[(2*k+1)*n/(2*streamed)] = false
		}
		var held int64
		for i, s := range sizes {
			if keep[i] {
				held += s
			}
		}
		if held <= room {
			return keep
		}
	}
	return keep
}

// keepLocked marks the layers the budget keeps, for the budget and pinned bytes now.
func (m *Manager) keepLocked() {
	if m.layers == nil {
		return
	}
	sizes := make([]int64, len(m.layers))
	for i, id := range m.layers {
		sizes[i] = int64(m.units[id].size)
	}
	for i, k := range KeepLayers(sizes, m.budget-m.pinned) {
		m.units[m.layers[i]].keep = k
	}
}

// distLocked is how many layers ahead of the pass's current one (the last given to
// EnterLayer) u is needed: 1 for the next, len(layers) for the current one itself.
func (m *Manager) distLocked(u *unit) int {
	n := len(m.layers)
	d := ((u.pos-m.cursor)%n + n) % n
	if d == 0 {
		d = n
	}
	return d
}

// EnterLayer tells the manager that a pass is at layer i (its place in pass order), about
// to acquire it: it starts reading layer i if it is not in memory, then, behind that
// read, the layers after it (wrapping round to the next pass's first ones) that are not
// in memory, as long as each fits the budget by evicting only streamed layers needed
// later than it.
func (m *Manager) EnterLayer(i int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.layers)
	if m.closed || n == 0 || i < 0 || i >= n {
		return
	}
	m.cursor = i
	if u := m.units[m.layers[i]]; u.state == absent {
		u.wanted = true
		m.startLocked(u, false)
	} else if u.state == loading {
		m.promoteLocked(u)
	}
	for k := 1; k < n; k++ {
		u := m.units[m.layers[(i+k)%n]]
		if u.state != absent {
			continue
		}
		if !m.layerRoomLocked(u) {
			return
		}
		m.stats.PrefetchIssued++
		u.prefetched = true
		m.startLocked(u, true)
	}
}

// layerRoomLocked reports whether layer u fits by evicting only streamed layers, not in
// use nor read ahead unused, that are needed later than u, and evicts them (furthest
// first).
func (m *Manager) layerRoomLocked(u *unit) bool {
	need := m.pinned + m.resident + int64(u.size) - m.budget
	if need <= 0 {
		return true
	}
	du := m.distLocked(u)
	var victims []*unit
	var freed int64
	for freed < need {
		var best *unit
		for _, id := range m.layers {
			v := m.units[id]
			if v.state != ready || v.refs > 0 || v.keep || v.prefetched || m.distLocked(v) <= du {
				continue
			}
			dup := false
			for _, x := range victims {
				dup = dup || x == v
			}
			if !dup && (best == nil || m.distLocked(v) > m.distLocked(best)) {
				best = v
			}
		}
		if best == nil {
			return false
		}
		victims = append(victims, best)
		freed += int64(best.size)
	}
	for _, v := range victims {
		m.dropLocked(v)
	}
	return true
}

// LayerBytes is, for a dense model's checkpoint in dir, the file bytes of each decoder
// layer that a backend streams (its affine-quantized matrices: packed U32 codes of two
// dimensions with their scales and biases, under "<prefix>.layers.<i>."), in the
// layers' order. It is nil for a model with stacked experts (those stream instead) or
// without quantized layers.
func LayerBytes(dir string) ([]int64, error) {
	if n, err := ExpertBytes(dir); err != nil || n > 0 {
		return nil, err
	}
	hs, err := safetensors.ReadDirHeaders(dir)
	if err != nil {
		return nil, err
	}
	type tensor struct {
		dtype safetensors.DType
		dims  int
		bytes int64
	}
	all := map[string]tensor{}
	for _, h := range hs {
		for _, t := range h.Tensors {
			all[t.Name] = tensor{t.DType, len(t.Shape), t.End - t.Begin}
		}
	}
	byLayer := map[int]int64{}
	last := -1
	for name, t := range all {
		p, ok := strings.CutSuffix(name, ".weight")
		if !ok || t.dims != 2 || t.dtype != safetensors.U32 {
			continue
		}
		s, ok1 := all[p+".scales"]
		b, ok2 := all[p+".biases"]
		i := strings.LastIndex(p, ".layers.")
		if !ok1 || !ok2 || i < 0 {
			continue
		}
		rest := p[i+len(".layers."):]
		j := strings.IndexByte(rest, '.')
		if j <= 0 {
			continue
		}
		idx, err := strconv.Atoi(rest[:j])
		if err != nil || idx < 0 {
			continue
		}
		byLayer[idx] += t.bytes + s.bytes + b.bytes
		last = max(last, idx)
	}
	if last < 0 {
		return nil, nil
	}
	out := make([]int64, last+1)
	for i, n := range byLayer {
		out[i] = n
	}
	return out, nil
}

// StreamedBytes is the file bytes of the checkpoint in dir that a backend streams: its
// experts, or, for a dense model, its layers' quantized matrices (dense is then true).
func StreamedBytes(dir string) (n int64, dense bool, err error) {
	if n, err = ExpertBytes(dir); err != nil || n > 0 {
		return n, false, err
	}
	layers, err := LayerBytes(dir)
	for _, b := range layers {
		n += b
	}
	return n, n > 0, err
}

// layerReaders is how many of a layer unit's segments are read at once: a layer is tens
// to hundreds of MB in a few large ranges, and one pread at a time leaves most of a
// disk's queue idle.
const layerReaders = 4

// expertReaders is how many of an expert unit's segments (its three matrices' codes,
// scales and biases) are read at once: a layer that misses one or two experts waits for
// their reads alone, and nine preads one after the other take nine of the disk's
// latencies. Random reads of the Qwen3-30B-A3B shape's experts on a virtual disk, taking
// turns: one miss at a time 12–16 ms an expert one segment at a time, 9–10 ms three at a
// time (nine: no better); a layer's 8 misses together 73–118 ms against 54–69 ms.
const expertReaders = 3

// readSegs reads u's segments into buf: a dense layer's (a few large ranges)
// layerReaders at a time, an expert's expertReaders at a time.
func readSegs(u *unit, files, direct []*os.File, buf []byte) (int64, error) {
	readers := layerReaders
	if !u.layer {
		readers = expertReaders
	}
	if len(u.segs) < 2 {
		var n int64
		for i := range u.segs {
			got, err := readSeg(u, i, files[i], direct[i], buf)
			n += got
			if err != nil {
				return n, err
			}
		}
		return n, nil
	}
	var wg sync.WaitGroup
	errs, got := make([]error, len(u.segs)), make([]int64, len(u.segs))
	next := make(chan int, len(u.segs))
	for i := range u.segs {
		next <- i
	}
	close(next)
	for range min(readers, len(u.segs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				got[i], errs[i] = readSeg(u, i, files[i], direct[i], buf)
			}
		}()
	}
	wg.Wait()
	var n int64
	for i := range u.segs {
		if errs[i] != nil {
			return n, errs[i]
		}
		n += got[i]
	}
	return n, nil
}

// readSeg reads u's segment i into its place in buf: directly (O_DIRECT) as its aligned
// span where u is read so, else, or where the file system refuses, through the page cache.
func readSeg(u *unit, i int, file, direct *os.File, buf []byte) (int64, error) {
	s := u.segs[i]
	if u.direct && s.Len > 0 {
		lo := alignDown(s.Off)
		span := int(alignUp(s.Off+s.Len) - lo)
		got, err := readDirect(direct, buf[u.slots[i]:u.slots[i]+span], lo, int(s.Off+s.Len-lo))
		if got > 0 || err != nil {
			return int64(got), err
		}
	}
	return s.Len, readRange(file, buf[u.offs[i]:u.offs[i]+int(s.Len)], s.Off)
}
