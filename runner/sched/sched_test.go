package sched

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type fakeModel struct {
	name   string
	closed atomic.Int32
}

func (m *fakeModel) Close() error { m.closed.Add(1); return nil }

// fakeLoader counts loads and can block or fail them.
type fakeLoader struct {
	mu     sync.Mutex
	loads  map[string]int
	models map[string][]*fakeModel
	gate   chan struct{} // when set, loads wait for it to close
	fail   error
}

func newLoader() *fakeLoader {
	return &fakeLoader{loads: map[string]int{}, models: map[string][]*fakeModel{}}
}

func (f *fakeLoader) req(key string, size int64) Request {
	return Request{Key: key, Name: key, Size: size, Load: func(ctx context.Context) (Model, error) {
		f.mu.Lock()
		f.loads[key]++
		gate, fail := f.gate, f.fail
		f.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if fail != nil {
			return nil, fail
		}
		m := &fakeModel{name: key}
		f.mu.Lock()
		f.models[key] = append(f.models[key], m)
		f.mu.Unlock()
		return m, nil
	}}
}

func (f *fakeLoader) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loads[key]
}

func (f *fakeLoader) last(key string) *fakeModel {
	f.mu.Lock()
	defer f.mu.Unlock()
	ms := f.models[key]
	return ms[len(ms)-1]
}

func dur(d time.Duration) *time.Duration { return &d }

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkNoLeak asserts the goroutine count returns to its value before the test.
func checkNoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		eventually(t, "goroutines to exit", func() bool { return runtime.NumGoroutine() <= before })
	})
}

func TestLoadOnceShared(t *testing.T) {
	checkNoLeak(t)
	f := newLoader()
	f.gate = make(chan struct{})
	s := New(Config{NumParallel: 4})
	defer s.Close()
	var wg sync.WaitGroup
	leases := make(chan *Lease, 4)
	for range 4 {
		wg.Go(func() {
			l, err := s.Acquire(context.Background(), f.req("a", 1))
			if err != nil {
				t.Error(err)
				return
			}
			leases <- l
		})
	}
	time.Sleep(20 * time.Millisecond)
	close(f.gate)
	wg.Wait()
	close(leases)
	n := 0
	for l := range leases {
		if l.Model != f.last("a") {
			t.Fatal("leases hold different models")
		}
		if l.LoadDuration <= 0 {
			t.Error("a request that waited for the load reports no load duration")
		}
		l.Release()
		n++
	}
	if n != 4 || f.count("a") != 1 {
		t.Fatalf("leases %d, loads %d; want 4 and 1", n, f.count("a"))
	}
	l, err := s.Acquire(context.Background(), f.req("a", 1))
	if err != nil || l.LoadDuration != 0 {
		t.Fatalf("second use: err %v, load duration %v (want none: already loaded)", err, l.LoadDuration)
	}
	l.Release()
}

func TestParallelAndQueue(t *testing.T) {
	checkNoLeak(t)
	f := newLoader()
	s := New(Config{NumParallel: 1, MaxQueue: 1})
	defer s.Close()
	l1, err := s.Acquire(context.Background(), f.req("a", 1))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lease)
	go func() {
		l, err := s.Acquire(context.Background(), f.req("a", 1))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	eventually(t, "the second request to queue", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.waiting == 1 })
	if _, err := s.Acquire(context.Background(), f.req("a", 1)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third request: err %v, want ErrQueueFull", err)
	}
	select {
	case <-got:
		t.Fatal("second request ran while the only slot was held")
	case <-time.After(20 * time.Millisecond):
	}
	l1.Release()
	l2 := <-got
	if l2 == nil {
		t.Fatal("no lease")
	}
	l2.Release()
	l2.Release() // twice is harmless
	if st := s.Running(); len(st) != 1 || st[0].Active != 0 {
		t.Fatalf("running %+v", st)
	}
}

func TestCancelWhileQueued(t *testing.T) {
	checkNoLeak(t)
	f := newLoader()
	s := New(Config{NumParallel: 1, MaxQueue: 1})
	defer s.Close()
	l1, _ := s.Acquire(context.Background(), f.req("a", 1))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { _, err := s.Acquire(ctx, f.req("a", 1)); errc <- err }()
	eventually(t, "queued", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.waiting == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	s.mu.Lock()
	w := s.waiting
	s.mu.Unlock()
	if w != 0 {
		t.Fatalf("a cancelled request stayed in the queue (%d waiting)", w)
	}
	l1.Release()
}

func TestLoadErrorToAllWaiters(t *testing.T) {
	checkNoLeak(t)
	f := newLoader()
	f.gate = make(chan struct{})
	f.fail = errors.New("config.json: unknown model_type \"foo\"")
	s := New(Config{NumParallel: 1})
	defer s.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Go(func() {
			_, err := s.Acquire(context.Background(), f.req("bad", 1))
			errs <- err
		})
	}
	time.Sleep(20 * time.Millisecond)
	close(f.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err == nil || !strings.Contains(err.Error(), "unknown model_type") || !strings.Contains(err.Error(), `"bad"`) {
			t.Fatalf("err %v: want the load error naming the model", err)
		}
	}
	if f.count("bad") != 1 {
		t.Fatalf("%d loads for concurrent requests, want 1", f.count("bad"))
	}
	f.mu.Lock()
	f.fail = nil
	f.mu.Unlock()
	l, err := s.Acquire(context.Background(), f.req("bad", 1))
	if err != nil {
		t.Fatalf("a later request must retry the load: %v", err)
	}
	l.Release()
}

func TestLoaderPanic(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	_, err := s.Acquire(context.Background(), Request{Key: "p", Name: "p", Load: func(context.Context) (Model, error) { panic("boom") }})
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("err %v", err)
	}
}

func TestKeepAlive(t *testing.T) {
	checkNoLeak(t)
	f := newLoader()
	s := New(Config{DefaultKeepAlive: time.Hour})
	defer s.Close()

	r := f.req("short", 1)
	r.KeepAlive = dur(30 * time.Millisecond)
	l, _ := s.Acquire(context.Background(), r)
	l.Release()
	if st := s.Running(); len(st) != 1 || st[0].ExpiresAt.IsZero() {
		t.Fatalf("running %+v: want one model with an expiry", st)
	}
	eventually(t, "idle unload", func() bool { return f.last("short").closed.Load() == 1 && len(s.Running()) == 0 })

	r = f.req("zero", 1)
	r.KeepAlive = dur(0)
	l, _ = s.Acquire(context.Background(), r)
	if f.last("zero").closed.Load() != 0 {
		t.Fatal("unloaded while in use")
	}
	l.Release()
	eventually(t, "unload at release", func() bool { return f.last("zero").closed.Load() == 1 })

	r = f.req("forever", 1)
	r.KeepAlive = dur(-1)
	l, _ = s.Acquire(context.Background(), r)
	l.Release()
	time.Sleep(30 * time.Millisecond)
	if st := s.Running(); len(st) != 1 || !st[0].Forever || f.last("forever").closed.Load() != 0 {
		t.Fatalf("running %+v: want the model kept", st)
	}
	// A new request renews the timer: the old one must not unload the model.
	r = f.req("forever", 1)
	r.KeepAlive = dur(40 * time.Millisecond)
	l, _ = s.Acquire(context.Background(), r)
	time.Sleep(60 * time.Millisecond)
	if f.last("forever").closed.Load() != 0 {
		t.Fatal("unloaded while in use")
	}
	l.Release()
	eventually(t, "unload after the renewed keep_alive", func() bool { return f.last("forever").closed.Load() == 1 })
}

func TestMemoryBudgetEvictsLRU(t *testing.T) {
	checkNoLeak(t)
	f := newLoader()
	s := New(Config{MemoryBudget: 100, NumParallel: 1})
	defer s.Close()
	use := func(key string, size int64) {
		t.Helper()
		l, err := s.Acquire(context.Background(), f.req(key, size))
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
	}
	use("a", 40)
	time.Sleep(2 * time.Millisecond)
	use("b", 40)
	time.Sleep(2 * time.Millisecond)
	use("a", 40) // a is now the most recently used
	time.Sleep(2 * time.Millisecond)
	use("c", 40) // needs room: b goes
	// Models close in the background: wait for b, then a must still be open.
	eventually(t, "b (least recently used) unloaded", func() bool { return f.last("b").closed.Load() == 1 })
	if f.last("a").closed.Load() != 0 {
		t.Fatalf("want b (least recently used) unloaded and a kept")
	}
	names := []string{}
	for _, st := range s.Running() {
		names = append(names, st.Name)
	}
	if strings.Join(names, ",") != "c,a" {
		t.Fatalf("running %v, want c,a (most recent first)", names)
	}

	// A busy model is not evicted: the load waits until it is released.
	la, _ := s.Acquire(context.Background(), f.req("a", 40))
	lc, _ := s.Acquire(context.Background(), f.req("c", 40))
	got := make(chan *Lease)
	go func() {
		l, err := s.Acquire(context.Background(), f.req("d", 90))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("loaded over the budget while the others were busy")
	case <-time.After(20 * time.Millisecond):
	}
	la.Release()
	select {
	case <-got:
		t.Fatal("loaded with 40 of 100 still held")
	case <-time.After(20 * time.Millisecond):
	}
	lc.Release()
	ld := <-got
	ld.Release()
	eventually(t, "a and c unloaded to make room for d", func() bool {
		return f.last("a").closed.Load() == 1 && f.last("c").closed.Load() == 1
	})

	var tooLarge *TooLargeError
	if _, err := s.Acquire(context.Background(), f.req("huge", 101)); !errors.As(err, &tooLarge) {
		t.Fatalf("err %v, want TooLargeError", err)
	}

	// Estimate runs only for a load, and its error fails the request.
	calls := 0
	r := f.req("d", 0)
	r.Estimate = func() (int64, error) { calls++; return 90, nil }
	l, err := s.Acquire(context.Background(), r)
	if err != nil || calls != 0 {
		t.Fatalf("loaded model: err %v, %d estimates (want none)", err, calls)
	}
	l.Release()
	r = f.req("e", 0)
	r.Estimate = func() (int64, error) { calls++; return 0, errors.New("memory pressure is critical") }
	if _, err := s.Acquire(context.Background(), r); err == nil || calls != 1 || !strings.Contains(err.Error(), "critical") {
		t.Fatalf("err %v after %d estimates", err, calls)
	}
}

func TestFingerprintReload(t *testing.T) {
	f := newLoader()
	s := New(Config{NumParallel: 2})
	defer s.Close()
	r := f.req("a", 1)
	r.Fingerprint = "ctx=2048"
	l1, _ := s.Acquire(context.Background(), r)
	first := f.last("a")
	r2 := f.req("a", 1)
	r2.Fingerprint = "ctx=8192"
	got := make(chan *Lease)
	go func() { l, _ := s.Acquire(context.Background(), r2); got <- l }()
	select {
	case <-got:
		t.Fatal("reloaded while the old model was in use")
	case <-time.After(20 * time.Millisecond):
	}
	l1.Release()
	l2 := <-got
	eventually(t, "the old model closed", func() bool { return first.closed.Load() == 1 })
	if l2.Model == first || f.count("a") != 2 {
		t.Fatal("want the old model closed and a new one loaded")
	}
	l2.Release()
}

func TestUnloadAndClose(t *testing.T) {
	checkNoLeak(t)
	f := newLoader()
	s := New(Config{})
	l, _ := s.Acquire(context.Background(), f.req("a", 1))
	if !s.Unload("a") {
		t.Fatal("Unload of a loaded model reported false")
	}
	if s.Unload("nope") {
		t.Fatal("Unload of an unknown model reported true")
	}
	if f.last("a").closed.Load() != 0 {
		t.Fatal("closed while in use")
	}
	l.Release()
	eventually(t, "unload once idle", func() bool { return f.last("a").closed.Load() == 1 })

	l, _ = s.Acquire(context.Background(), f.req("b", 1))
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
		t.Fatal("Close returned while a request held a model")
	case <-time.After(20 * time.Millisecond):
	}
	if _, err := s.Acquire(context.Background(), f.req("c", 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("err %v, want ErrClosed", err)
	}
	l.Release()
	<-done
	if f.last("b").closed.Load() != 1 {
		t.Fatal("Close left a model loaded")
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	c, err := ConfigFromEnv(env(nil))
	if err != nil || c.NumParallel != 1 || c.MaxQueue != 512 || c.DefaultKeepAlive != 5*time.Minute || c.RetryAfter != 10*time.Second {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	for v, want := range map[string]time.Duration{"30": 30 * time.Second, "1m": time.Minute} {
		if c, err := ConfigFromEnv(env(map[string]string{"MLXG_RETRY_AFTER": v})); err != nil || c.RetryAfter != want {
			t.Errorf("MLXG_RETRY_AFTER=%s: %v %v", v, c.RetryAfter, err)
		}
	}
	c, err = ConfigFromEnv(env(map[string]string{"MLXG_NUM_PARALLEL": "4", "OLLAMA_NUM_PARALLEL": "2", "OLLAMA_MAX_QUEUE": "7",
		"OLLAMA_KEEP_ALIVE": "90", "MLXG_KEEP_ALIVE": ""}))
	if err != nil || c.NumParallel != 4 || c.MaxQueue != 7 || c.DefaultKeepAlive != 90*time.Second {
		t.Fatalf("got %+v %v", c, err)
	}
	c, _ = ConfigFromEnv(env(map[string]string{"MLXG_KEEP_ALIVE": "-1", "OLLAMA_KEEP_ALIVE": "1m"}))
	if c.DefaultKeepAlive >= 0 {
		t.Fatalf("negative keep_alive must mean forever, got %v", c.DefaultKeepAlive)
	}
	for k, v := range map[string]string{"MLXG_NUM_PARALLEL": "0", "MLXG_MAX_QUEUE": "x", "MLXG_KEEP_ALIVE": "soon", "MLXG_RETRY_AFTER": "0"} {
		if _, err := ConfigFromEnv(env(map[string]string{k: v})); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: err %v, want one naming the variable", k, v, err)
		}
	}
	for in, want := range map[string]time.Duration{"5m": 5 * time.Minute, "0": 0, "1.5": 1500 * time.Millisecond, "-5m": -1, "1h30m": 90 * time.Minute} {
		if got, err := ParseKeepAlive(in); err != nil || got != want {
			t.Errorf("ParseKeepAlive(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}
