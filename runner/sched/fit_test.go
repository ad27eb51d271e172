package sched

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// shortErr is a memory refusal as kvstore's MemoryError makes it: transient.
type shortErr struct{ need, avail int64 }

func (e *shortErr) Error() string {
	return fmt.Sprintf("not enough memory: need %d, %d available", e.need, e.avail)
}
func (e *shortErr) Transient() bool { return true }

// machine is a fake computer's memory: other processes hold some, each loaded model its size. Its
// estimates refuse what does not fit in what is available plus what the scheduler would free, as the
// KV policy does; a load takes its memory only once the models unloaded for it have given theirs back.
type machine struct {
	t      *testing.T
	mu     sync.Mutex
	total  int64
	others int64
	models map[*fakeModel]int64
	loads  map[string]int
}

func newMachine(t *testing.T, total, others int64) *machine {
	return &machine{t: t, total: total, others: others, models: map[*fakeModel]int64{}, loads: map[string]int{}}
}

type machineModel struct {
	*fakeModel
	m *machine
}

func (mm machineModel) Close() error {
	mm.m.mu.Lock()
	delete(mm.m.models, mm.fakeModel)
	mm.m.mu.Unlock()
	return mm.fakeModel.Close()
}

func (m *machine) availableLocked() int64 {
	a := m.total - m.others
	for _, n := range m.models {
		a -= n
	}
	return a
}

func (m *machine) req(key, fingerprint string, size int64) Request {
	return Request{Key: key, Name: key, Fingerprint: fingerprint,
		EstimateFreeing: func(freed int64) (int64, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if avail := m.availableLocked() + freed; size > avail {
				return 0, &shortErr{need: size, avail: avail}
			}
			return size, nil
		},
		Load: func(context.Context) (Model, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if avail := m.availableLocked(); size > avail {
				return nil, &shortErr{need: size, avail: avail}
			}
			fm := &fakeModel{name: key + "@" + fingerprint}
			m.models[fm] = size
			m.loads[key+"@"+fingerprint]++
			return machineModel{fm, m}, nil
		}}
}

func (m *machine) loaded() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.models)
}

func (m *machine) loadCount(key, fingerprint string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.loads[key+"@"+fingerprint]
}

// use acquires and releases, returning the model served.
func use(t *testing.T, s *Scheduler, r Request) Model {
	t.Helper()
	l, err := s.Acquire(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	return l.Model
}

func checkBusy(t *testing.T, err error, retry time.Duration) {
	t.Helper()
	var b *BusyError
	var short *shortErr
	if !errors.Is(err, ErrBusy) || !errors.As(err, &b) || !errors.As(err, &short) {
		t.Fatalf("err %v (%T), want a *BusyError wrapping the memory refusal", err, err)
	}
	if d, ok := RetryAfter(err); !ok || d != retry || b.RetryAfter != retry {
		t.Errorf("RetryAfter %v %v, want %v", d, ok, retry)
	}
	if v, ok := RetryAfterSeconds(fmt.Errorf("wrapped: %w", err)); !ok || v != fmt.Sprint(int(retry/time.Second)) {
		t.Errorf("RetryAfterSeconds %q %v", v, ok)
	}
}

// TestRefusedModelKeepsTheRunningOne: a new model that does not fit even with the running model unloaded is
// refused with the transient error, and the running model stays loaded and serving.
func TestRefusedModelKeepsTheRunningOne(t *testing.T) {
	checkNoLeak(t)
	m := newMachine(t, 24, 14) // other processes hold 14 of 24
	s := New(Config{RetryAfter: 7 * time.Second})
	defer s.Close()
	a := use(t, s, m.req("a", "", 8))

	_, err := s.Acquire(context.Background(), m.req("b", "", 12)) // 2 free, 10 with a unloaded
	checkBusy(t, err, 7*time.Second)
	if a.(machineModel).closed.Load() != 0 || m.loaded() != 1 {
		t.Fatal("the running model was unloaded for a model that did not fit")
	}
	if got := use(t, s, m.req("a", "", 8)); got != a || m.loadCount("a", "") != 1 {
		t.Fatal("the running model does not serve after the refusal")
	}

	// The same model with other load options (a larger context): the old one serves on.
	_, err = s.Acquire(context.Background(), m.req("a", "ctx=32768", 12))
	checkBusy(t, err, 7*time.Second)
	if a.(machineModel).closed.Load() != 0 {
		t.Fatal("the running model was unloaded for a reload that did not fit")
	}
	if got := use(t, s, m.req("a", "", 8)); got != a {
		t.Fatal("the running model does not serve after the refused reload")
	}

	// Once the other processes give memory back, the reload goes ahead: the old model closes before the new
	// one loads (the fake machine refuses a load its memory is still held for).
	m.mu.Lock()
	m.others = 10
	m.mu.Unlock()
	b := use(t, s, m.req("a", "ctx=32768", 12))
	if b == a || a.(machineModel).closed.Load() != 1 || m.loaded() != 1 {
		t.Fatalf("reload: old closed %d, %d loaded", a.(machineModel).closed.Load(), m.loaded())
	}
}

// TestUnloadsOnlyWhatIsNeeded: the least recently used idle models go, only as many as the plan needs.
func TestUnloadsOnlyWhatIsNeeded(t *testing.T) {
	m := newMachine(t, 24, 0)
	s := New(Config{})
	defer s.Close()
	a := use(t, s, m.req("a", "", 8))
	time.Sleep(2 * time.Millisecond)
	b := use(t, s, m.req("b", "", 8))
	time.Sleep(2 * time.Millisecond)
	c := use(t, s, m.req("c", "", 4)) // 4 left
	use(t, s, m.req("d", "", 10))     // a (least recently used) must go, b need not
	if a.(machineModel).closed.Load() != 1 || b.(machineModel).closed.Load() != 0 || c.(machineModel).closed.Load() != 0 {
		t.Fatalf("closed: a %d b %d c %d; want only a", a.(machineModel).closed.Load(), b.(machineModel).closed.Load(), c.(machineModel).closed.Load())
	}
}

// TestWaitsForBusyModels: a model that fits once a busy model is idle waits for it instead of being refused,
// and idle models are not unloaded while it waits.
func TestWaitsForBusyModels(t *testing.T) {
	m := newMachine(t, 24, 0)
	s := New(Config{})
	defer s.Close()
	idle := use(t, s, m.req("idle", "", 6))
	la, err := s.Acquire(context.Background(), m.req("a", "", 14))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := s.Acquire(context.Background(), m.req("b", "", 16)) // 4 free, 10 with idle gone, 24 with a too
		if err == nil {
			l.Release()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("did not wait for the busy model: %v", err)
	case <-time.After(30 * time.Millisecond):
	}
	if idle.(machineModel).closed.Load() != 0 {
		t.Fatal("an idle model was unloaded before the waiting model was known to fit")
	}
	la.Release()
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	// A model that would not fit even with every model unloaded is refused at once.
	la, _ = s.Acquire(context.Background(), m.req("a", "", 14))
	defer la.Release()
	m.mu.Lock()
	m.others = 8
	m.mu.Unlock()
	_, err = s.Acquire(context.Background(), m.req("c", "", 20))
	checkBusy(t, err, 10*time.Second)
}

func TestBudgetUnloadsOnlyWhenItFits(t *testing.T) {
	f := newLoader()
	s := New(Config{MemoryBudget: 100})
	defer s.Close()
	l, _ := s.Acquire(context.Background(), f.req("a", 40))
	l.Release()
	lb, _ := s.Acquire(context.Background(), f.req("b", 40))
	got := make(chan struct{})
	go func() {
		l, err := s.Acquire(context.Background(), f.req("c", 90))
		if err != nil {
			t.Error(err)
		} else {
			l.Release()
		}
		close(got)
	}()
	time.Sleep(30 * time.Millisecond)
	if f.last("a").closed.Load() != 0 {
		t.Fatal("an idle model was unloaded for a load that still does not fit")
	}
	lb.Release()
	<-got
	eventually(t, "a and b unloaded for c", func() bool { return f.last("a").closed.Load() == 1 && f.last("b").closed.Load() == 1 })
}

// TestTransientErrors: Estimate's and Load's transient errors are BusyErrors; others pass as they are.
func TestTransientErrors(t *testing.T) {
	f := newLoader()
	s := New(Config{})
	defer s.Close()
	a := use(t, s, f.req("a", 1))
	r := f.req("b", 0)
	r.Estimate = func() (int64, error) { return 0, &shortErr{need: 5, avail: 1} }
	_, err := s.Acquire(context.Background(), r)
	checkBusy(t, err, 10*time.Second)

	r = f.req("a", 1)
	r.Fingerprint = "other"
	r.Estimate = func() (int64, error) { return 0, &shortErr{need: 5, avail: 1} }
	_, err = s.Acquire(context.Background(), r)
	checkBusy(t, err, 10*time.Second)
	if f.last("a").closed.Load() != 0 || use(t, s, f.req("a", 1)) != a {
		t.Fatal("the running model was unloaded for a reload whose estimate failed")
	}

	f.fail = fmt.Errorf("allocating: %w", &shortErr{need: 5, avail: 1})
	_, err = s.Acquire(context.Background(), f.req("c", 1))
	checkBusy(t, err, 10*time.Second)
	f.fail = errors.New("bad checkpoint")
	if _, err = s.Acquire(context.Background(), f.req("d", 1)); err == nil || errors.Is(err, ErrBusy) {
		t.Fatalf("a permanent load error: %v", err)
	}
	if _, ok := RetryAfter(err); ok {
		t.Fatal("RetryAfter for a permanent error")
	}
}
