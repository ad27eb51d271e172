package model

import (
	"math"
	"runtime/debug"
	"sync"
)

// A streamed model's memory plan keeps room for a prompt pass's activations (the CPU
// backend holds a pass's tensors until it ends: megabytes a row), which a decode step,
// a row or a few, leaves unused. SetDecodeLoan lends that room to the expert cache
// while the passes are small, and takes it back before a large one runs: more experts
// stay in memory while decoding, and fewer are read per token.
//
// The room is the Go heap's: while it is lent, the heap's soft limit (debug.SetMemoryLimit,
// which the server sets under a memory cgroup) is lowered by the loan, and the dead
// activations of the last large pass are returned to the system before the cache grows
// into their place. Taking the loan back evicts (unmaps) first, then raises the limit.

// loan is a model's lending state.
type loan struct {
	mu    sync.Mutex
	bytes int64 // lent while passes have at most rows rows; 0: never
	rows  int
	lent  bool
	large int // large passes running
}

// SetDecodeLoan lends bytes of the memory planned for large passes' activations to the
// model's expert cache (Residency) while no pass of more than rows rows runs. It has no
// effect on a model that does not stream. Call it before the first pass.
func (m *Model) SetDecodeLoan(bytes int64, rows int) {
	if m.res == nil || bytes <= 0 {
		return
	}
	m.loan.mu.Lock()
	defer m.loan.mu.Unlock()
	m.loan.bytes, m.loan.rows = bytes, max(rows, 1)
}

// pass readies the loan for a pass of rows rows: a large pass takes it back before it
// runs (and returns it when it ends, for the next small pass to lend again); a small
// pass lends it when no large pass runs. It returns the pass's end.
func (m *Model) pass(rows int) func() {
	l := &m.loan
	if m.res == nil {
		return func() {}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bytes <= 0 {
		return func() {}
	}
	if rows > l.rows {
		l.large++
		if l.lent {
			m.res.Lend(0) // the experts beyond the budget are unmapped here
			adjustMemoryLimit(l.bytes)
			l.lent = false
		}
		return func() {
			l.mu.Lock()
			l.large--
			l.mu.Unlock()
		}
	}
	if !l.lent && l.large == 0 {
		// The last large pass's tensors are garbage: back to the system before the
		// cache takes their room.
		debug.FreeOSMemory()
		adjustMemoryLimit(-l.bytes)
		m.res.Lend(l.bytes)
		l.lent = true
	}
	return func() {}
}

// endLoan takes the loan back for good (the model closes): the heap's limit gets its
// bytes again.
func (m *Model) endLoan() {
	m.loan.mu.Lock()
	defer m.loan.mu.Unlock()
	if m.loan.lent {
		m.res.Lend(0)
		adjustMemoryLimit(m.loan.bytes)
		m.loan.lent = false
	}
	m.loan.bytes = 0
}

// adjustMemoryLimit moves the Go heap's soft limit by d bytes, when one is set (lowering
// the limit the server set, and raising it back, commute with another model's loan).
func adjustMemoryLimit(d int64) {
	cur := debug.SetMemoryLimit(-1)
	if cur == math.MaxInt64 {
		return
	}
	debug.SetMemoryLimit(max(cur+d, 1))
}

// DecodeLoan reports the bytes lent to the expert cache now.
func (m *Model) DecodeLoan() int64 {
	m.loan.mu.Lock()
	defer m.loan.mu.Unlock()
	if m.loan.lent {
		return m.loan.bytes
	}
	return 0
}
