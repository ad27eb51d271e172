// Package residency keeps the part of a model's weights that fits a RAM budget in
// memory and reads the rest from the checkpoint's files when a pass needs it: the
// weight residency manager of models larger than memory.
//
// A unit is what is read and evicted as a whole: one expert's three matrices (gate, up
// and down rows with their scales and biases) of a mixture-of-experts layer, or one
// dense layer's tensors. A unit is a list of file ranges (Segment); the manager reads
// them with pread on a few worker goroutines, several units in flight, into buffers it
// owns (anonymous mappings, so an evicted unit's memory goes back to the system at
// once), and drops the ranges from the page cache after each read (posix_fadvise
// DONTNEED on Linux, F_NOCACHE on macOS), so that what the manager evicted is not kept
// charged to the process as cached file pages.
//
// The budget (bytes) is the caller's and may change at any time: SetBudget evicts down
// to a smaller one and lets the cache grow again under a larger one. Bytes the model
// holds outside the manager (non-expert weights, shared experts) are pinned with Pin
// and count first. Units in use (between Acquire and Release) are never evicted, so
// a budget smaller than one layer's working set is exceeded by that set rather than
// deadlocking; Stats reports the overshoot.
//
// The package imports no backend: the CPU backend and the MLX backend both read their
// units through it.
package residency

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Segment is a byte range of a file.
type Segment struct {
	Path string
	Off  int64
	Len  int64
}

// Part is the i-th of n equal consecutive parts of s: one expert's rows of a stacked
// [experts, rows, cols] tensor.
func (s Segment) Part(i, n int) Segment {
	l := s.Len / int64(n)
	return Segment{Path: s.Path, Off: s.Off + int64(i)*l, Len: l}
}

// Options configure a Manager.
type Options struct {
	// Budget is the RAM, in bytes, for the pinned bytes and the resident units.
	Budget int64
	// Policy picks the unit to evict.
	Policy Policy
	// HalfLife is the Frequency policy's half-life, in uses (0: DefaultHalfLife).
	HalfLife float64
	// Workers is the number of reading goroutines (0: 8): reads in flight, which a disk
	// serves faster together than one at a time (random expert reads of a virtual disk:
	// 41, 200 and 324 MB/s with 1, 4 and 8 in flight, no more with 16).
	Workers int
	// Buffered reads through the page cache even where the files can be read directly
	// (O_DIRECT on Linux).
	Buffered bool
}

// Stats are the manager's counters since it was made.
type Stats struct {
	Budget   int64 // bytes
	Lent     int64 // bytes lent beyond the budget for now (Lend)
	Pinned   int64 // bytes held outside the manager, counted first
	Resident int64 // bytes of units in memory or being read
	Peak     int64 // the most Pinned + Resident reached
	Total    int64 // bytes of every unit
	Units    int
	InMemory int // units resident

	// Hits and Misses count Acquires of a unit already in memory, or not; a unit read
	// ahead on a guess counts as a miss at its first use (and as PrefetchUseful), so that
	// the hit rate is what the cache kept, not what the guesses read.
	Hits, Misses   int64
	Reads          int64 // units read
	BytesRead      int64
	Evictions      int64
	PrefetchIssued int64 // units read ahead of a use
	PrefetchUseful int64 // of those, units acquired before being evicted
	// Predicted and PredictedRight count the read-ahead's guesses of what a pass would
	// use and those it did use, read ahead or not.
	Predicted, PredictedRight int64
	// RepeatGuessed and RepeatRight count the previous token's picks at a layer as a
	// guess of the next token's there, and the right ones, whether or not the read-ahead
	// used them: the routing's locality, beside the read-ahead's own guesses.
	RepeatGuessed, RepeatRight int64
	Streamed                   int64 // file bytes of every unit
	// Wait is the time Acquires spent waiting for reads, and ReadTime the time the reading
	// goroutines spent reading (both in nanoseconds): where a streamed pass's time goes.
	Wait, ReadTime int64
}

// HitRate is Hits / (Hits + Misses), 0 with no use.
func (s Stats) HitRate() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

// PredictionAccuracy is PredictedRight / Predicted, 0 with no guess.
func (s Stats) PredictionAccuracy() float64 {
	if s.Predicted == 0 {
		return 0
	}
	return float64(s.PredictedRight) / float64(s.Predicted)
}

// PrefetchAccuracy is PrefetchUseful / PrefetchIssued, 0 with none issued.
func (s Stats) PrefetchAccuracy() float64 {
	if s.PrefetchIssued == 0 {
		return 0
	}
	return float64(s.PrefetchUseful) / float64(s.PrefetchIssued)
}

type unitState int

const (
	absent unitState = iota
	loading
	ready
)

type unit struct {
	id   int
	segs []Segment
	offs []int // where each segment starts in buf
	// direct: the segments are read with O_DIRECT, each as the aligned range from
	// alignDown(Off) to alignUp(Off+Len) into buf at slots[i], so that its data starts
	// at offs[i], as aligned as the file offset (as a mapping of the file would be).
	direct bool
	slots  []int
	size   int // bytes of buf
	state  unitState
	buf    []byte
	done   chan struct{} // closed when a read ends
	err    error
	refs   int
	score  score
	// prefetched: read ahead and not acquired since.
	prefetched bool
	// wanted: read for a pass that asked for it (Want) and has not acquired it yet; its
	// Acquire is a miss even when the read is over by then.
	wanted bool
	// layer: a dense model's layer, pos its place in the pass (layers.go); keep: one of
	// the layers the budget keeps in memory.
	layer, keep bool
	pos         int
	// expected: a confident guess of a pass about to run (Expect) until Settle; evicted
	// only when nothing else can go.
	expected bool
}

// Manager is a weight residency manager. Its methods are safe for concurrent use.
type Manager struct {
	mu       sync.Mutex
	work     *sync.Cond // signalled when a read is queued or the manager closes
	scorer   scorer
	budget   int64
	lent     int64 // Lend's bytes beyond the budget, for units
	pinned   int64
	resident int64
	units    []*unit
	tick     uint64
	demand   []*unit // queued reads, taken first
	ahead    []*unit // queued read-aheads
	files    map[string]*os.File
	direct   map[string]*os.File // opened for direct reads; nil where they failed
	buffered bool
	free     map[int][][]byte // evicted buffers kept for the next read of their size
	layers   []int            // a dense model's layer units in pass order (layers.go)
	cursor   int              // the layer a dense pass is at
	closed   bool
	stats    Stats
	ev       *events // EventsEnv's log, nil without it
	wg       sync.WaitGroup
}

// New starts a manager.
func New(o Options) *Manager {
	if o.HalfLife <= 0 {
		o.HalfLife = DefaultHalfLife
	}
	if o.Workers <= 0 {
		o.Workers = 8
	}
	m := &Manager{scorer: scorer{policy: o.Policy, halfLife: o.HalfLife}, budget: o.Budget,
		files: map[string]*os.File{}, direct: map[string]*os.File{}, free: map[int][][]byte{}, buffered: o.Buffered || directAlign == 0,
		ev: openEvents()}
	m.work = sync.NewCond(&m.mu)
	for range o.Workers {
		m.wg.Add(1)
		go m.worker()
	}
	return m
}

// segAlign aligns each segment in a unit's buffer for any element type.
const segAlign = 64

// alignDown and alignUp round a file offset to directAlign.
func alignDown(off int64) int64 { return off &^ (directAlign - 1) }
func alignUp(off int64) int64   { return (off + directAlign - 1) &^ (directAlign - 1) }

// Add registers a unit and returns its id; nothing is read until it is used.
func (m *Manager) Add(segs []Segment) (int, error) {
	if len(segs) == 0 {
		return 0, errors.New("residency: a unit of no segments")
	}
	u := &unit{segs: append([]Segment(nil), segs...), offs: make([]int, len(segs))}
	for _, s := range segs {
		if s.Len < 0 || s.Off < 0 || s.Path == "" {
			return 0, fmt.Errorf("residency: bad segment %+v", s)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	u.direct = !m.buffered
	for _, s := range segs {
		if _, ok := m.files[s.Path]; !ok {
			f, err := openUncached(s.Path)
			if err != nil {
				return 0, fmt.Errorf("residency: %w", err)
			}
			m.files[s.Path] = f
		}
		if u.direct {
			f, ok := m.direct[s.Path]
			if !ok {
				f, _ = openDirect(s.Path) // nil: read through the page cache
				m.direct[s.Path] = f
			}
			u.direct = f != nil
		}
	}
	if u.direct {
		u.slots = make([]int, len(segs))
		for i, s := range segs {
			lo, hi := alignDown(s.Off), alignUp(s.Off+s.Len)
			if s.Len == 0 {
				lo, hi = s.Off, s.Off
			}
			u.slots[i], u.offs[i] = u.size, u.size+int(s.Off-lo)
			u.size += int(hi - lo)
		}
	} else {
		for i, s := range segs {
			u.offs[i] = u.size
			u.size += (int(s.Len) + segAlign - 1) &^ (segAlign - 1)
		}
	}
	u.id = len(m.units)
	m.units = append(m.units, u)
	for _, s := range segs {
		m.stats.Streamed += s.Len
	}
	m.stats.Units++
	m.stats.Total += int64(u.size)
	return len(m.units) - 1, nil
}

// Pin counts bytes held outside the manager (weights used on every pass) against the
// budget, before any unit; a negative n unpins.
func (m *Manager) Pin(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pinned += n
	m.keepLocked()
	m.evictLocked(0)
}

// SetBudget changes the budget: a smaller one evicts unused units at once, a larger one
// lets more stay.
func (m *Manager) SetBudget(b int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.budget = b
	m.keepLocked()
	m.evictLocked(0)
	if m.pinned+m.resident > m.limitLocked() {
		m.dropFreeLocked()
	}
}

// dropFreeLocked unmaps the buffers kept for reuse: memory beyond what the units hold,
// which a smaller budget may not leave room for.
func (m *Manager) dropFreeLocked() {
	for _, l := range m.free {
		for _, b := range l {
			freeBuf(b)
		}
	}
	m.free = map[int][][]byte{}
}

// Lend lets the units use n bytes beyond the budget until the next Lend (0: none),
// memory the caller does not use for now: a streamed model's room for a prompt pass's
// activations, idle while it decodes. Taking it back evicts at once (an evicted unit's
// memory goes back to the system before Lend returns), except units in use. A dense
// model's manager borrows nothing: its kept layers follow the budget alone.
func (m *Manager) Lend(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.layers) > 0 {
		n = 0
	}
	m.lent = max(n, 0)
	m.evictLocked(0)
	if m.pinned+m.resident > m.limitLocked() {
		m.dropFreeLocked()
	}
}

// limitLocked is what the units may take beside the pinned bytes: the budget and the loan.
func (m *Manager) limitLocked() int64 { return m.budget + m.lent }

// Budget returns the current budget.
func (m *Manager) Budget() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.budget
}

// Stats returns the counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.Budget, s.Lent, s.Pinned, s.Resident = m.budget, m.lent, m.pinned, m.resident
	for _, u := range m.units {
		if u.state == ready {
			s.InMemory++
		}
	}
	return s
}

// Handle is a unit in use: its bytes stay in memory until Release.
type Handle struct {
	m *Manager
	u *unit
}

// Seg returns segment i of the unit, as read from its file.
func (h Handle) Seg(i int) []byte {
	s := h.u.offs[i]
	return h.u.buf[s : s+int(h.u.segs[i].Len) : s+int(h.u.segs[i].Len)]
}

// Release ends the use; the unit may be evicted from then on.
func (h Handle) Release() {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	h.u.refs--
	if h.u.refs == 0 && h.u.state == absent {
		// Read failed: nothing to keep.
		return
	}
	h.m.evictLocked(0)
}

// Acquire returns unit id in memory, reading it first if needed, and counts a use.
func (m *Manager) Acquire(id int) (Handle, error) { return m.AcquireUses(id, 1) }

// AcquireUses is Acquire for a product that serves uses picks of the unit at once (the
// rows of a prompt's pass that picked the expert): the eviction policy weighs the use
// by them, so that an expert most of a prompt's tokens picked outlasts one that a
// single token did. Counted as one hit or miss.
func (m *Manager) AcquireUses(id, uses int) (Handle, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return Handle{}, errors.New("residency: manager closed")
	}
	u := m.units[id]
	m.tick++
	m.scorer.touch(&u.score, m.tick, uses)
	if u.state == ready && !u.wanted && !u.prefetched {
		m.stats.Hits++
		m.ev.log('A', id, "hit")
	} else {
		m.stats.Misses++
		m.ev.log('A', id, "miss")
	}
	u.wanted = false
	if u.prefetched {
		u.prefetched = false
		m.stats.PrefetchUseful++
	}
	u.refs++
	if u.state == absent {
		m.startLocked(u, false)
	} else if u.state == loading {
		m.promoteLocked(u)
	}
	done := u.done
	m.mu.Unlock()
	var waited time.Duration
	select {
	case <-done:
	default:
		t := time.Now()
		<-done
		waited = time.Since(t)
	}
	m.mu.Lock()
	m.stats.Wait += int64(waited)
	err := u.err
	if err != nil {
		u.refs--
	}
	m.mu.Unlock()
	if err != nil {
		return Handle{}, err
	}
	return Handle{m: m, u: u}, nil
}

// Resident reports whether unit id is in memory now (not being read).
func (m *Manager) Resident(id int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.units[id].state == ready
}

// NotePrediction counts the read-ahead's guesses of the units a pass would use, and
// the right ones.
func (m *Manager) NotePrediction(guessed, right int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.Predicted += int64(guessed)
	m.stats.PredictedRight += int64(right)
}

// NoteRepeat counts the previous token's picks as a guess (Stats.RepeatGuessed).
func (m *Manager) NoteRepeat(guessed, right int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.RepeatGuessed += int64(guessed)
	m.stats.RepeatRight += int64(right)
}

// Want starts reading the units not in memory that a pass is about to acquire, in
// order, ahead of any read-ahead; until acquired they are evicted only when nothing else
// can go, so that the reads of the ones after them do not evict them first. Their
// scores are left as they were: marking them used now would cancel the decay of their
// past uses, and each expert read back in would rank as a frequent one.
func (m *Manager) Want(ids ...int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	for _, id := range ids {
		u := m.units[id]
		switch u.state {
		case absent:
			u.wanted = true
			m.startLocked(u, false)
		case loading:
			m.promoteLocked(u)
		}
	}
}

// Prefetch starts reading the units not in memory, behind any reads a pass waits for.
// A unit is read ahead only when it fits the budget without evicting a unit used more
// recently than it was last used (a guess never pushes out what a pass is using).
func (m *Manager) Prefetch(ids ...int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	for _, id := range ids {
		u := m.units[id]
		if u.state != absent {
			continue
		}
		if !m.roomForLocked(u) {
			continue
		}
		m.stats.PrefetchIssued++
		u.prefetched = true
		m.startLocked(u, true)
	}
}

// Expect starts reading units that a pass will probably acquire soon (a confident
// guess: the next layer's experts picked by its router from the current hidden
// state), behind the reads a pass waits for. Unlike Prefetch, a guess may evict as a
// read a pass asked for would (the policy's victim), except units in use, being read
// or expected themselves; it is skipped only when it does not fit without exceeding
// the budget. Expected units, read or already in memory, are kept until Settle.
func (m *Manager) Expect(ids ...int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	for _, id := range ids {
		u := m.units[id]
		if u.state != absent {
			u.expected = true
			continue
		}
		for m.pinned+m.resident+int64(u.size) > m.limitLocked() {
			v := m.victimLocked(nil)
			if v == nil || v.expected || v.wanted {
				break
			}
			m.dropLocked(v)
		}
		if m.pinned+m.resident+int64(u.size) > m.limitLocked() {
			continue
		}
		m.stats.PrefetchIssued++
		u.prefetched, u.expected = true, true
		m.startLocked(u, true)
	}
}

// Settle ends the expectation of units (their pass has come): from then on a guessed
// unit the pass did not use is the first to go.
func (m *Manager) Settle(ids ...int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		m.units[id].expected = false
	}
}

// Close stops the workers and frees every buffer; handles must have been released.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	m.work.Broadcast()
	m.mu.Unlock()
	m.wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	var first error
	for _, u := range m.units {
		if u.buf != nil {
			freeBuf(u.buf)
			u.buf, u.state = nil, absent
		}
	}
	for _, l := range m.free {
		for _, b := range l {
			freeBuf(b)
		}
	}
	m.free = nil
	for _, f := range m.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	for _, f := range m.direct {
		if f != nil {
			f.Close()
		}
	}
	m.files, m.direct = nil, nil
	m.ev.close()
	m.ev = nil
	return first
}

// roomForLocked reports whether u fits by evicting only units whose last use is older
// than u's, and evicts them.
func (m *Manager) roomForLocked(u *unit) bool {
	need := m.pinned + m.resident + int64(u.size) - m.limitLocked()
	if need <= 0 {
		return true
	}
	var victims []*unit
	var freed int64
	for freed < need {
		v := m.victimLocked(victims)
		if v == nil || v.expected || v.wanted || v.score.last >= u.score.last && !v.prefetched {
			return false
		}
		victims = append(victims, v)
		freed += int64(v.size)
	}
	for _, v := range victims {
		m.dropLocked(v)
	}
	return true
}

// victimLocked is the unit the policy evicts first, skipping those in use, being read,
// or in skip; nil when none can go.
func (m *Manager) victimLocked(skip []*unit) *unit {
	var best *unit
outer:
	for _, u := range m.units {
		if u.state != ready || u.refs > 0 || u.keep {
			continue
		}
		for _, s := range skip {
			if s == u {
				continue outer
			}
		}
		if best == nil || m.worseLocked(u, best) {
			best = u
		}
	}
	return best
}

// worseLocked: a unit a pass asked for (Want) and has not acquired yet goes last, then
// an expected one; a prefetched unit nobody used goes before any used one. Of two
// streamed layers, the one needed further ahead goes first (layers.go).
func (m *Manager) worseLocked(a, b *unit) bool {
	if a.wanted != b.wanted {
		return b.wanted
	}
	if a.expected != b.expected {
		return b.expected
	}
	if a.layer && b.layer {
		return m.distLocked(a) > m.distLocked(b)
	}
	if a.prefetched != b.prefetched {
		return a.prefetched
	}
	return m.scorer.worse(&a.score, &b.score, m.tick)
}

// evictLocked evicts until extra more bytes fit the budget, or nothing more can go.
func (m *Manager) evictLocked(extra int64) {
	for m.pinned+m.resident+extra > m.limitLocked() {
		v := m.victimLocked(nil)
		if v == nil {
			return
		}
		m.dropLocked(v)
	}
}

func (m *Manager) dropLocked(v *unit) {
	m.stats.Evictions++
	m.ev.log('E', v.id, "")
	m.resident -= int64(v.size)
	v.wanted, v.expected = false, false
	if v.prefetched {
		v.prefetched = false
	}
	buf := v.buf
	v.buf, v.state = nil, absent
	if l := m.free[len(buf)]; len(l) < 2 && m.pinned+m.resident+int64(len(buf)) <= m.limitLocked() {
		m.free[len(buf)] = append(l, buf)
		return
	}
	freeBuf(buf)
}

// startLocked makes room for u and queues its read.
func (m *Manager) startLocked(u *unit, ahead bool) {
	m.evictLocked(int64(u.size))
	m.resident += int64(u.size)
	m.stats.Peak = max(m.stats.Peak, m.pinned+m.resident)
	u.state, u.err, u.done = loading, nil, make(chan struct{})
	if ahead {
		m.ev.log('R', u.id, "guess")
	} else {
		m.ev.log('R', u.id, "demand")
	}
	if l := m.free[u.size]; len(l) > 0 {
		u.buf = l[len(l)-1]
		m.free[u.size] = l[:len(l)-1]
	} else {
		u.buf = nil // allocated by the worker, outside the lock
		m.ev.log('N', u.id, "")
	}
	if ahead {
		m.ahead = append(m.ahead, u)
	} else {
		m.demand = append(m.demand, u)
	}
	m.work.Signal()
}

// promoteLocked moves a queued read-ahead of u to the front: a pass now waits for it.
func (m *Manager) promoteLocked(u *unit) {
	for i, a := range m.ahead {
		if a == u {
			m.ahead = append(m.ahead[:i], m.ahead[i+1:]...)
			m.demand = append(m.demand, u)
			return
		}
	}
}

func (m *Manager) worker() {
	defer m.wg.Done()
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		for !m.closed && len(m.demand) == 0 && len(m.ahead) == 0 {
			m.work.Wait()
		}
		if m.closed {
			// Fail what is still queued so that no Acquire waits forever.
			for _, u := range append(m.demand, m.ahead...) {
				m.finishLocked(u, errors.New("residency: manager closed"), 0)
			}
			m.demand, m.ahead = nil, nil
			return
		}
		var u *unit
		if len(m.demand) > 0 {
			u, m.demand = m.demand[0], m.demand[1:]
		} else {
			u, m.ahead = m.ahead[0], m.ahead[1:]
		}
		buf := u.buf
		files, direct := make([]*os.File, len(u.segs)), make([]*os.File, len(u.segs))
		for i, s := range u.segs {
			files[i] = m.files[s.Path]
			if u.direct {
				direct[i] = m.direct[s.Path]
			}
		}
		m.mu.Unlock()
		var err error
		if buf == nil {
			buf, err = allocBuf(u.size)
		}
		var n int64
		t := time.Now()
		if err == nil {
			n, err = readSegs(u, files, direct, buf)
		}
		took := time.Since(t)
		m.mu.Lock()
		m.stats.ReadTime += int64(took)
		u.buf = buf
		m.finishLocked(u, err, n)
	}
}

// finishLocked ends u's read: ready, or absent with err for its waiters.
func (m *Manager) finishLocked(u *unit, err error, n int64) {
	if err == nil {
		u.state = ready
		m.stats.Reads++
		m.stats.BytesRead += n
	} else {
		u.err = fmt.Errorf("residency: reading %s: %w", u.segs[0].Path, err)
		u.state = absent
		u.prefetched, u.expected = false, false
		m.resident -= int64(u.size)
		if u.buf != nil {
			freeBuf(u.buf)
			u.buf = nil
		}
	}
	close(u.done)
	// A unit read ahead that nobody holds may be over a budget that shrank meanwhile.
	m.evictLocked(0)
}
