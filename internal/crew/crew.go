// Package crew runs fork-join work on goroutines that stay alive between calls.
//
// A decode step of the CPU backend makes some 170 parallel calls (every matrix product,
// every layer's attention) a few hundred microseconds apart. A goroutine started for each
// call has to wake an idle OS thread (a futex; on a virtual machine, a halted vCPU),
// which can take longer than the call's own work, so that a second thread adds little.
// A crew's workers instead spin after each job, watching for the next, for Linger before
// they exit, and take each job within a microsecond or so.
package crew

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Linger is how long an idle worker spins for the next job before exiting: longer than
// the gaps within a decode step and between tokens, short enough that an idle server
// burns next to nothing and leaves no goroutines behind.
const Linger = 2 * time.Millisecond

// Run runs a call on the process's shared crew. One crew serves the CPU backend's
// products and kvstore's attention alike: they alternate within a decode step, and two
// crews' idle workers spinning side by side would take the cores from each other, each
// crew's spinners delaying the other's jobs.
func Run(n, pieces, workers int, fn func(lo, hi int)) { shared.Run(n, pieces, workers, fn) }

var shared Crew

// Crew shares work between the calling goroutine and its workers. The zero value is
// ready; a Crew runs one call at a time, and a call made while it is busy (from inside
// another call's fn, or from a second goroutine) runs on goroutines of its own.
type Crew struct {
	mu   sync.Mutex // held by the call the crew runs
	job  atomic.Pointer[job]
	live atomic.Int32 // workers alive (spinning or working)
	// A decode step makes some 200 calls: instead of allocating a job for each, a call
	// reuses the last one once no worker can reach it. A worker takes a job by counting
	// itself in inside and then checking that the job is still published; the caller
	// unpublishes it and reuses it only after seeing inside at zero.
	inside atomic.Int32
	spare  *job   // a job no worker can reach (under mu)
	seq    uint64 // jobs published (under mu)
	// The warm task (Warm) and the workers reading its memory at the moment.
	warm    atomic.Pointer[WarmTask]
	warming atomic.Int32
}

// job is one call: pieces ranges of [0, n), claimed in turn.
type job struct {
	seq       atomic.Uint64 // which publication: a reused job is a new one to the workers
	fn        func(lo, hi int)
	n, pieces int
	next      atomic.Int64
	finished  atomic.Int64
	done      sync.WaitGroup // Done when the last piece is computed (no channel to allocate)
}

// run claims and computes pieces until none are left.
func (j *job) run() {
	for {
		p := int(j.next.Add(1)) - 1
		if p >= j.pieces {
			return
		}
		j.fn(j.n*p/j.pieces, j.n*(p+1)/j.pieces)
		if j.finished.Add(1) == int64(j.pieces) {
			j.done.Done()
		}
	}
}

// spinWait is how long the caller spins for the workers' last pieces before it sleeps
// on done: long enough for a piece that is nearly done, short enough that a worker whose
// thread waits for a core (the machine shared with other processes) gets the caller's.
const spinWait = 50 * time.Microsecond

// Run computes fn over [0, n) cut into pieces contiguous ranges, on the calling goroutine
// and up to workers others, each claiming ranges in turn (so that a goroutine that lost
// its core holds up one range, not a share), and returns when all are done. Which
// goroutine computes a range is not fixed: fn's result must not depend on it.
func (c *Crew) Run(n, pieces, workers int, fn func(lo, hi int)) {
	if workers <= 0 || pieces <= 1 {
		for p := range pieces {
			fn(n*p/pieces, n*(p+1)/pieces)
		}
		return
	}
	if !c.mu.TryLock() {
		j := &job{fn: fn, n: n, pieces: pieces}
		j.done.Add(1)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(j.run)
		}
		j.run()
		wg.Wait()
		return
	}
	defer c.mu.Unlock()
	j := c.spare
	if j == nil {
		j = new(job)
	}
	c.spare = nil
	j.fn, j.n, j.pieces = fn, n, pieces
	j.next.Store(0)
	j.finished.Store(0)
	j.done.Add(1)
	c.seq++
	j.seq.Store(c.seq)
	c.job.Store(j)
	for c.live.Load() < int32(workers) {
		c.live.Add(1)
		c.inside.Add(1) // on the new worker's behalf: it runs j first
		go c.work(j)
	}
	j.run()
	for i, t0 := 0, time.Now(); j.finished.Load() < int64(j.pieces); i++ {
		if i%64 == 63 && time.Since(t0) > spinWait {
			j.done.Wait()
			break
		}
		pause()
	}
	c.job.Store(nil)
	// A worker still inside is on its way out (past the last piece): wait a little for
	// it, else leave j to the collector.
	for i := 0; i < 256 && c.inside.Load() != 0; i++ {
		pause()
	}
	if c.inside.Load() == 0 {
		j.fn = nil // keep nothing of the caller's alive
		c.spare = j
	}
}

// work is a worker: it runs first, then every job the crew publishes, until it has
// waited Linger for one.
func (c *Crew) work(first *job) {
	defer c.live.Add(-1)
	last := first.seq.Load()
	first.run()
	c.inside.Add(-1)
	idle := time.Now()
	yielded := idle
	for i := 0; ; i++ {
		if j := c.job.Load(); j != nil && j.seq.Load() != last {
			c.inside.Add(1)
			if c.job.Load() == j { // still published, and now it stays as it is until we leave
				last = j.seq.Load()
				j.run()
			}
			c.inside.Add(-1)
			idle, i = time.Now(), 0
			continue
		}
		if w := c.warm.Load(); w != nil {
			c.warmStep(w)
			continue
		}
		if i%64 == 63 {
			now := time.Now()
			if now.Sub(idle) > Linger {
				return
			}
			if now.Sub(yielded) > yieldEvery {
				runtime.Gosched()
				yielded = now
			}
		}
		pause()
	}
}

// yieldEvery is how often an idle worker gives its thread to other goroutines (the
// server's, which would otherwise wait for the runtime's preemption, 10 ms). It is a
// time, not a count of spins: spins are short, and the many idle workers of a large
// crew yielding after every few of them would queue up on the scheduler's lock, taking
// CPU from the busy threads.
const yieldEvery = 100 * time.Microsecond

// Warm asks the shared crew's idle workers to read t's memory into the caches, a line at a
// time in chunks of warmChunk bytes between their checks for the next job: memory the
// caller's next call will read (the CPU backend's next weight matrix, during the serial
// work between two products, when the memory bus would otherwise idle). It starts t over;
// a later Warm replaces an unfinished one; with no idle worker nothing happens. A task is
// made once and warmed again and again (no allocation per call). Before the memory is
// unmapped, StopWarm.
func Warm(t *WarmTask) {
	t.next.Store(0)
	shared.warm.Store(t)
}

// StopWarm drops the shared crew's warm task and returns once no worker reads its memory.
func StopWarm() { shared.stopWarm() }

func (c *Crew) stopWarm() {
	c.warm.Store(nil)
	for c.warming.Load() != 0 {
		pause()
	}
}

// warmStep has a worker read the task's next step, counted in warming so that StopWarm
// can wait for it (as inside does for jobs), and drops the task once it is read through.
func (c *Crew) warmStep(w *WarmTask) {
	c.warming.Add(1)
	defer c.warming.Add(-1)
	if c.warm.Load() != w { // replaced or stopped meanwhile
		return
	}
	b, ok := w.span(int(w.next.Add(1) - 1))
	if !ok {
		c.warm.CompareAndSwap(w, nil)
		return
	}
	var s byte
	for i := 0; i < len(b); i += 64 {
		s += b[i]
	}
	warmSink.Store(uint32(s))
}

// WarmTask is memory for Warm and how far the workers are through it.
type WarmTask struct {
	mem  [][]byte
	next atomic.Int64 // steps taken
}

// NewWarmTask is a task over mem's slices, in order.
func NewWarmTask(mem ...[]byte) *WarmTask { return &WarmTask{mem: mem} }

// warmChunk is the bytes of one step: 64 lines, a fraction of a microsecond of loads in
// flight together, the most a worker delays the next job by.
const warmChunk = 4096

var warmSink atomic.Uint32 // the loads' sum goes here, so that they are not dropped

// span is step k's memory: the steps go through each of mem in turn, warmChunk bytes at a
// time; false past the last.
func (w *WarmTask) span(k int) ([]byte, bool) {
	for _, m := range w.mem {
		n := (len(m) + warmChunk - 1) / warmChunk
		if k < n {
			return m[k*warmChunk : min((k+1)*warmChunk, len(m))], true
		}
		k -= n
	}
	return nil, false
}
