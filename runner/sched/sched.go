// Package sched keeps models loaded for the server: it loads a model on first use, shares it between up to
// NumParallel requests at a time (the rest queue, at most MaxQueue of them, then ErrQueueFull), unloads it when
// its keep_alive runs out, and keeps the loaded models under a memory budget by unloading the least recently
// used idle one when a load would not fit. A load that fails fails every request waiting on it; a request whose
// context ends while it waits leaves the queue.
//
// No loaded model is unloaded to make room before the new one is known to fit: the request's estimate (the
// memory policy's plan) is asked with the memory that unloading would free counted as available, and only a
// plan that fits, in memory and in the budget, unloads anything. A model that does not fit even then leaves
// the loaded ones serving: the request waits when busy models would make room once idle, and is refused with
// a *BusyError (errors.Is ErrBusy, with a RetryAfter) when the refusal is transient, such as memory pressure.
//
// The scheduler knows a loaded model only through the Model interface and a request's Load function, so it is
// tested with fakes.
package sched

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
	// which is wasted work for a model already loaded); its error fails the request, as a *BusyError when
	// the error is transient (see BusyError).
	Estimate func() (int64, error)
	// EstimateFreeing, when set, replaces Estimate: freed is the memory (sizes of loaded models) the
	// scheduler would unload before this load, which the estimate counts as available. The scheduler asks
	// with nothing freed first, then with the least recently used idle models one by one, and unloads only
	// those the first estimate that fits counted on.
	EstimateFreeing func(freed int64) (int64, error)
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
	RetryAfter       time.Duration // a BusyError's RetryAfter; default 10s
}

// Errors returned by Acquire.
var (
	ErrQueueFull = errors.New("server busy: too many requests are queued; retry later or raise MLXG_MAX_QUEUE")
	ErrClosed    = errors.New("the server is shutting down")
	// ErrBusy matches (errors.Is) every *BusyError.
	ErrBusy = errors.New("server busy: the model cannot be loaded now")
)

// BusyError is a transient refusal to load a model, such as memory pressure or memory other models or
// processes hold: the models already loaded keep serving, and the same request may succeed later. An
// error from Estimate, EstimateFreeing or Load is transient when it, or an error it wraps, has a
// Transient method that reports true (kvstore's MemoryError). HTTP servers answer it with 503 and a
// Retry-After header.
type BusyError struct {
	Name       string
	RetryAfter time.Duration
	Err        error // why: the memory policy's refusal
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("server busy: model %q cannot be loaded now (%v); the loaded models keep serving; retry in %s",
		e.Name, e.Err, e.RetryAfter)
}

// Unwrap returns the cause.
func (e *BusyError) Unwrap() error { return e.Err }

// Is reports whether target is ErrBusy.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// RetryAfter returns the delay a client should wait before retrying err, when err is or wraps a
// *BusyError; the HTTP layer sends it as Retry-After, in whole seconds (at least 1).
func RetryAfter(err error) (time.Duration, bool) {
	var b *BusyError
	if !errors.As(err, &b) {
		return 0, false
	}
	return b.RetryAfter, true
}

// RetryAfterSeconds is RetryAfter as a Retry-After header's value: whole seconds, rounded up, at least 1.
func RetryAfterSeconds(err error) (string, bool) {
	d, ok := RetryAfter(err)
	if !ok {
		return "", false
	}
	return strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10), true
}

// transient reports whether err says its refusal may pass.
func transient(err error) bool {
	var t interface{ Transient() bool }
	return errors.As(err, &t) && t.Transient()
}

// busy wraps a transient err in a *BusyError; other errors are returned as they are.
func (s *Scheduler) busy(name string, err error) error {
	var b *BusyError
	if err == nil || errors.As(err, &b) || !transient(err) {
		return err
	}
	return &BusyError{Name: name, RetryAfter: s.cfg.RetryAfter, Err: err}
}

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
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = 10 * time.Second
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
			// Reload with other options: the old model goes only once the new one is known to fit.
			if e.active == 0 {
				started, err := s.placeLocked(req, e)
				if err != nil {
					return nil, err
				}
				if started {
					loadedHere = true
					continue
				}
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
			started, err := s.placeLocked(req, nil)
			if err != nil {
				return nil, err
			}
			if started {
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

// placeLocked starts req's load when it fits, unloading idle models to make room only once an estimate
// that counts their memory as freed says it fits, in memory and in the budget; replacing, when set, is the
// idle model of the same key that must go in any case. It reports false when req must wait for busy models
// to become idle, and errs (a *BusyError when transient) when the model does not fit even then: nothing
// is unloaded in either case.
func (s *Scheduler) placeLocked(req Request, replacing *entry) (bool, error) {
	var idle []*entry // least recently used first
	var busy int64    // what models in use or loading hold: theirs once they are idle
	for _, e := range s.entries {
		switch {
		case e == replacing || e.err != nil:
		case !e.loading && e.active == 0:
			idle = append(idle, e)
		default:
			busy += e.size
		}
	}
	slices.SortFunc(idle, func(a, b *entry) int { return a.lastUsed.Compare(b.lastUsed) })
	var drop []*entry
	if replacing != nil {
		drop = append(drop, replacing)
	}

	estimateOnce := req.EstimateFreeing == nil // Estimate and Size do not depend on what is freed
	size, estErr := int64(0), error(nil)
	estimate := func(freed int64) (int64, error) {
		switch {
		case req.EstimateFreeing != nil:
			return req.EstimateFreeing(freed)
		case req.Estimate != nil:
			return req.Estimate()
		}
		return req.Size, nil
	}
	sizeOf := func(es []*entry) int64 {
		var n int64
		for _, e := range es {
			n += e.size
		}
		return n
	}
	used := s.usedLocked()
	var refusal error // the latest transient estimate error
	for k := 0; k <= len(idle); k++ {
		freeing := append(drop[:len(drop):len(drop)], idle[:k]...)
		freed := sizeOf(freeing)
		if k == 0 || !estimateOnce {
			size, estErr = estimate(freed)
		}
		if estErr != nil {
			if !transient(estErr) {
				return false, estErr // no unloading changes it
			}
			refusal = estErr
			if estimateOnce {
				break // without EstimateFreeing, unloading cannot be known to help
			}
			continue
		}
		refusal = nil
		if s.cfg.MemoryBudget > 0 && size > s.cfg.MemoryBudget {
			return false, &TooLargeError{Name: req.Name, Size: size, Budget: s.cfg.MemoryBudget}
		}
		if s.cfg.MemoryBudget <= 0 || used-freed+size <= s.cfg.MemoryBudget {
			var closing []<-chan struct{}
			for _, e := range freeing {
				closing = append(closing, s.unloadLocked(e))
			}
			req.Size, req.Estimate, req.EstimateFreeing = size, nil, nil
			s.startLoadLocked(req, closing)
			return true, nil
		}
	}
	if busy == 0 {
		if refusal != nil {
			return false, s.busy(req.Name, refusal)
		}
		return false, nil // only the budget is short and nothing more can be freed: wait for a change
	}
	// Busy models hold memory: wait for them when the model fits once they are idle too.
	if refusal != nil && !estimateOnce {
		all := sizeOf(drop) + sizeOf(idle) + busy
		if _, err := estimate(all); err != nil {
			return false, s.busy(req.Name, err)
		}
	} else if refusal != nil {
		return false, s.busy(req.Name, refusal)
	}
	return false, nil
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

// startLoadLocked loads req's model once the models unloaded for it (closing) have closed: their memory
// must be free before the load reads how much there is.
func (s *Scheduler) startLoadLocked(req Request, closing []<-chan struct{}) {
	e := &entry{req: req, loading: true, ready: make(chan struct{}), size: req.Size}
	s.entries[req.Key] = e
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for _, c := range closing {
			select {
			case <-c:
			case <-s.ctx.Done():
			}
		}
		m, err := load(s.ctx, req)
		s.mu.Lock()
		defer s.mu.Unlock()
		e.loading = false
		if err != nil {
			e.err = s.busy(req.Name, fmt.Errorf("loading model %q: %w", req.Name, err))
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

// unloadLocked removes an idle entry and closes its model in the background; the channel closes when it
// has closed.
func (s *Scheduler) unloadLocked(e *entry) <-chan struct{} {
	if s.entries[e.req.Key] == e {
		delete(s.entries, e.req.Key)
	}
	e.gen++
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	done := s.closeModel(e.model)
	s.broadcast()
	return done
}

func (s *Scheduler) closeModel(m Model) <-chan struct{} {
	done := make(chan struct{})
	if m == nil {
		close(done)
		return done
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		_ = m.Close()
	}()
	return done
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
