// Package sched keeps models loaded for the server: it loads a model on first use, shares it between up to
// NumParallel requests at a time (the rest queue, at most MaxQueue of them, then ErrQueueFull), unloads it when
// its keep_alive runs out, and keeps the loaded models under a memory budget by unloading the least recently
// used idle one when a load would not fit. A load that fails fails every request waiting on it; a request whose
// context ends while it waits leaves the queue.
//
// The scheduler knows a loaded model only through the Model interface and a request's Load function, so it is
// tested with fakes.
package sched

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Model is a loaded model.
type Model interface {
	// Close frees the model. The scheduler calls it once, when no request holds the model.
	Close() error
}

// Request asks for a model.
type Request struct {
	// Key identifies the model (e.g. its snapshot directory): requests with the same Key share one loaded model.
	Key string
	// Name is the name the client used, shown by Running.
	Name string
	// Fingerprint covers the load-time options (e.g. the context size); a loaded model with another fingerprint
	// is reloaded once no request holds it.
	Fingerprint string
	// Size is the memory the model will take once loaded, in bytes (weights and KV cache).
	Size int64
	// Estimate, when set, gives Size only when the model must be loaded (it may read the machine's memory,
	// which is wasted work for a model already loaded); its error fails the request.
	Estimate func() (int64, error)
	// KeepAlive is how long the model stays loaded after this request: nil is the scheduler's default, 0 unloads
	// it as soon as it is idle, a negative value keeps it until the server stops.
	KeepAlive *time.Duration
	// Load loads the model. It runs once for all the requests waiting on it, under the scheduler's context, not
	// the request's: a client that leaves does not cancel a load others may wait for.
	Load func(ctx context.Context) (Model, error)
}

// Config sets the scheduler's limits.
type Config struct {
	NumParallel      int           // requests served at once per model (default 1)
	MaxQueue         int           // requests waiting for a model, in all (default 512)
	MemoryBudget     int64         // bytes all loaded models may take; 0: no limit
	DefaultKeepAlive time.Duration // default 5m; negative: forever
}

// Errors returned by Acquire.
var (
	ErrQueueFull = errors.New("server busy: too many requests are queued; retry later or raise MLXG_MAX_QUEUE")
	ErrClosed    = errors.New("the server is shutting down")
)

// TooLargeError is returned when a model alone does not fit in the memory budget.
type TooLargeError struct {
	Name         string
	Size, Budget int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("model %q needs %d MiB but the memory budget is %d MiB; use a smaller model or context (num_ctx), or a smaller KV cache",
		e.Name, e.Size>>20, e.Budget>>20)
}

// Scheduler is safe for concurrent use.
type Scheduler struct {
	cfg    Config
	ctx    context.Context // loads run under it
	cancel context.CancelFunc

	mu      sync.Mutex
	wake    chan struct{} // closed and replaced whenever a slot, a load or memory frees up
	entries map[string]*entry
	waiting int
	closed  bool
	wg      sync.WaitGroup // loads and closes in flight
}

type entry struct {
	req      Request // the request that loaded it
	model    Model
	loading  bool
	ready    chan struct{} // closed when the load ends
	err      error         // the load's error
	size     int64
	active   int
	lastUsed time.Time
	keep     time.Duration // keep_alive of the latest request
	expires  time.Time     // zero while active or kept forever
	timer    *time.Timer
	gen      int // invalidates stale timers
}

// New makes a scheduler.
func New(cfg Config) *Scheduler {
	if cfg.NumParallel <= 0 {
		cfg.NumParallel = 1
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 512
	}
	if cfg.DefaultKeepAlive == 0 {
		cfg.DefaultKeepAlive = 5 * time.Minute
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Scheduler{cfg: cfg, ctx: ctx, cancel: cancel, wake: make(chan struct{}), entries: map[string]*entry{}}
}

// Lease is a request's hold on a loaded model; Release it when the request ends.
type Lease struct {
	s        *Scheduler
	e        *entry
	keep     time.Duration
	released bool
	// Model is the loaded model; LoadDuration is how long this request waited for a load (0 when it was loaded).
	Model        Model
	LoadDuration time.Duration
}

// broadcast wakes every waiter; s.mu is held.
func (s *Scheduler) broadcast() {
	close(s.wake)
	s.wake = make(chan struct{})
}

func (s *Scheduler) keepAlive(req Request) time.Duration {
	if req.KeepAlive == nil {
		return s.cfg.DefaultKeepAlive
	}
	return *req.KeepAlive
}

// Acquire returns a lease on the model req names, loading it when needed and waiting for a free slot.
func (s *Scheduler) Acquire(ctx context.Context, req Request) (*Lease, error) {
	start := time.Now()
	loadedHere := false
	s.mu.Lock()
	queued := false
	defer func() {
		if queued {
			s.waiting--
		}
		s.mu.Unlock()
	}()
	for {
		if s.closed {
			return nil, ErrClosed
		}
		e := s.entries[req.Key]
		switch {
		case e != nil && e.loading:
			// Wait below for the load.
		case e != nil && e.err != nil:
			return nil, e.err
		case e != nil && e.req.Fingerprint != req.Fingerprint:
			if e.active == 0 {
				s.unloadLocked(e)
				continue
			}
		case e != nil && e.active < s.cfg.NumParallel:
			e.active++
			e.lastUsed = time.Now()
			e.keep = s.keepAlive(req)
			e.expires = time.Time{}
			e.gen++
			if e.timer != nil {
				e.timer.Stop()
				e.timer = nil
			}
			l := &Lease{s: s, e: e, keep: e.keep, Model: e.model}
			if loadedHere {
				l.LoadDuration = time.Since(start)
			}
			return l, nil
		case e == nil:
			if req.Estimate != nil {
				size, err := req.Estimate()
				if err != nil {
					return nil, err
				}
				req.Size, req.Estimate = size, nil
			}
			fits, err := s.makeRoomLocked(req)
			if err != nil {
				return nil, err
			}
			if fits {
				s.startLoadLocked(req)
				loadedHere = true
				continue
			}
		}
		// Wait for a change.
		if !queued {
			if s.waiting >= s.cfg.MaxQueue {
				return nil, ErrQueueFull
			}
			s.waiting++
			queued = true
		}
		wake := s.wake
		var ready chan struct{}
		if e != nil && e.loading {
			ready = e.ready
			loadedHere = true
		}
		s.mu.Unlock()
		select {
		case <-wake:
		case <-ready:
		case <-ctx.Done():
			s.mu.Lock()
			return nil, ctx.Err()
		}
		s.mu.Lock()
		if e != nil && ready != nil && e.err != nil {
			return nil, e.err // the load failed for everyone waiting on it
		}
	}
}

// makeRoomLocked reports whether req's model fits now, unloading least recently used idle models as needed.
func (s *Scheduler) makeRoomLocked(req Request) (bool, error) {
	if s.cfg.MemoryBudget <= 0 {
		return true, nil
	}
	if req.Size > s.cfg.MemoryBudget {
		return false, &TooLargeError{Name: req.Name, Size: req.Size, Budget: s.cfg.MemoryBudget}
	}
	for s.usedLocked()+req.Size > s.cfg.MemoryBudget {
		var idle []*entry
		for _, e := range s.entries {
			if !e.loading && e.active == 0 && e.err == nil {
				idle = append(idle, e)
			}
		}
		if len(idle) == 0 {
			return false, nil // wait for a model to become idle
		}
		lru := slices.MinFunc(idle, func(a, b *entry) int { return a.lastUsed.Compare(b.lastUsed) })
		s.unloadLocked(lru)
	}
	return true, nil
}

func (s *Scheduler) usedLocked() int64 {
	var n int64
	for _, e := range s.entries {
		if e.err == nil {
			n += e.size
		}
	}
	return n
}

func (s *Scheduler) startLoadLocked(req Request) {
	e := &entry{req: req, loading: true, ready: make(chan struct{}), size: req.Size}
	s.entries[req.Key] = e
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		m, err := load(s.ctx, req)
		s.mu.Lock()
		defer s.mu.Unlock()
		e.loading = false
		if err != nil {
			e.err = fmt.Errorf("loading model %q: %w", req.Name, err)
			delete(s.entries, req.Key) // later requests try again
		} else if s.closed {
			e.err = ErrClosed
			delete(s.entries, req.Key)
			s.closeModel(m)
		} else {
			e.model = m
			if sz, ok := m.(interface{ Size() int64 }); ok && sz.Size() > 0 {
				e.size = sz.Size()
			}
			e.lastUsed = time.Now()
		}
		close(e.ready)
		s.broadcast()
	}()
}

// load calls req.Load, turning a panic into an error: a broken model must not take the server down.
func load(ctx context.Context, req Request) (m Model, err error) {
	defer func() {
		if r := recover(); r != nil {
			m, err = nil, fmt.Errorf("panic while loading: %v", r)
		}
	}()
	m, err = req.Load(ctx)
	if err == nil && m == nil {
		err = errors.New("loader returned no model")
	}
	return m, err
}

// unloadLocked removes an idle entry and closes its model in the background.
func (s *Scheduler) unloadLocked(e *entry) {
	if s.entries[e.req.Key] == e {
		delete(s.entries, e.req.Key)
	}
	e.gen++
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	s.closeModel(e.model)
	s.broadcast()
}

func (s *Scheduler) closeModel(m Model) {
	if m == nil {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = m.Close()
	}()
}

// Release ends the lease. The model stays loaded for the request's keep_alive once no request holds it.
func (l *Lease) Release() {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.released {
		return
	}
	l.released = true
	e := l.e
	e.active--
	e.lastUsed = time.Now()
	if e.active == 0 && s.entries[e.req.Key] == e {
		s.scheduleExpiryLocked(e)
	}
	s.broadcast()
}

// scheduleExpiryLocked arms the idle timer of an entry no request holds.
func (s *Scheduler) scheduleExpiryLocked(e *entry) {
	switch {
	case e.keep == 0:
		s.unloadLocked(e)
	case e.keep < 0:
		e.expires = time.Time{}
	default:
		e.expires = time.Now().Add(e.keep)
		gen := e.gen
		e.timer = time.AfterFunc(e.keep, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if e.gen == gen && e.active == 0 && s.entries[e.req.Key] == e {
				s.unloadLocked(e)
			}
		})
	}
}

// Unload unloads the model with this key now if it is idle, else as soon as its last request ends. It reports
// whether the model was loaded.
func (s *Scheduler) Unload(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[key]
	if e == nil || e.loading {
		return false
	}
	e.keep = 0
	if e.active == 0 {
		s.unloadLocked(e)
	}
	return true
}

// Status describes a loaded model.
type Status struct {
	Key, Name string
	Model     Model
	Size      int64
	Active    int
	ExpiresAt time.Time     // zero while requests hold it or when it is kept forever
	Forever   bool          // keep_alive < 0
	KeepAlive time.Duration // of the latest request: how long it stays once idle
}

// Running lists the loaded models, most recently used first.
func (s *Scheduler) Running() []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Status
	var last []time.Time
	for _, e := range s.entries {
		if e.loading || e.err != nil {
			continue
		}
		out = append(out, Status{Key: e.req.Key, Name: e.req.Name, Model: e.model, Size: e.size, Active: e.active,
			ExpiresAt: e.expires, Forever: e.keep < 0, KeepAlive: e.keep})
		last = append(last, e.lastUsed)
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return last[b].Compare(last[a]) })
	sorted := make([]Status, len(out))
	for i, j := range idx {
		sorted[i] = out[j]
	}
	return sorted
}

// Close refuses new requests, unloads every model once its requests end (the caller cancels them first), and
// waits for loads and closes in flight.
func (s *Scheduler) Close() {
	s.mu.Lock()
	s.closed = true
	s.broadcast()
	s.mu.Unlock()
	s.cancel() // loads in flight stop
	for {
		s.mu.Lock()
		busy := false
		for _, e := range s.entries {
			if e.loading || e.active > 0 {
				busy = true
				continue
			}
			s.unloadLocked(e)
		}
		wake := s.wake
		s.mu.Unlock()
		if !busy {
			break
		}
		<-wake
	}
	s.wg.Wait()
}
