package crew

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRun: every index is computed exactly once, whatever the pieces and workers; calls
// made from inside a call and from several goroutines at once run on goroutines of their
// own and are as complete; the workers exit once idle for Linger.
func TestRun(t *testing.T) {
	before := runtime.NumGoroutine()
	var c Crew
	check := func(n, pieces, workers int) {
		hits := make([]atomic.Int32, n)
		c.Run(n, pieces, workers, func(lo, hi int) {
			if lo >= hi && n >= pieces {
				t.Errorf("empty range %d-%d of %d in %d pieces", lo, hi, n, pieces)
			}
			for i := lo; i < hi; i++ {
				hits[i].Add(1)
			}
		})
		for i := range hits {
			if h := hits[i].Load(); h != 1 {
				t.Fatalf("n %d, pieces %d, workers %d: index %d computed %d times", n, pieces, workers, i, h)
			}
		}
	}
	for _, n := range []int{1, 7, 64, 1000} {
		for _, pieces := range []int{1, 2, 8, 33} {
			for _, workers := range []int{0, 1, 3} {
				if pieces <= n {
					check(n, pieces, workers)
				}
			}
		}
	}
	// Nested: the inner call finds the crew busy.
	var total atomic.Int64
	c.Run(8, 8, 1, func(lo, hi int) {
		c.Run(100, 4, 1, func(lo, hi int) { total.Add(int64(hi - lo)) })
	})
	if total.Load() != 800 {
		t.Fatalf("nested calls computed %d of 800", total.Load())
	}
	// Several goroutines at once.
	var wg sync.WaitGroup
	total.Store(0)
	for range 4 {
		wg.Go(func() {
			for range 50 {
				c.Run(1000, 8, 1, func(lo, hi int) { total.Add(int64(hi - lo)) })
			}
		})
	}
	wg.Wait()
	if total.Load() != 4*50*1000 {
		t.Fatalf("concurrent calls computed %d of %d", total.Load(), 4*50*1000)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines, %d before: the workers did not exit", n, before)
	}
}

// BenchmarkRun: the time of a call whose work is spread over two goroutines, against
// starting a goroutine per call (the crew's workers spin between calls):
//
//	go test -bench Run ./internal/crew/
func BenchmarkRun(b *testing.B) {
	spin := func(d time.Duration) {
		for t0 := time.Now(); time.Since(t0) < d; {
		}
	}
	for _, work := range []time.Duration{0, 50 * time.Microsecond, 150 * time.Microsecond} {
		fn := func(lo, hi int) { spin(work * time.Duration(hi-lo) / 64) }
		b.Run("crew/"+work.String(), func(b *testing.B) {
			var c Crew
			for b.Loop() {
				c.Run(64, 8, 1, fn)
			}
		})
		b.Run("goroutine/"+work.String(), func(b *testing.B) {
			for b.Loop() {
				j := &job{fn: fn, n: 64, pieces: 8}
				j.done.Add(1)
				var wg sync.WaitGroup
				wg.Go(j.run)
				j.run()
				wg.Wait()
			}
		})
	}
}

// TestWarmSpans: a warm task's steps go through each range once, in order, warmChunk
// bytes at a time, and end after the last.
func TestWarmSpans(t *testing.T) {
	lens := []int{0, 1, warmChunk - 1, warmChunk, warmChunk + 1, 10000, 0, 3}
	var mem [][]byte
	for i, n := range lens {
		m := make([]byte, n)
		for j := range m {
			m[j] = byte(i*7 + j)
		}
		mem = append(mem, m)
	}
	w := NewWarmTask(mem...)
	var got []byte
	k := 0
	for ; ; k++ {
		b, ok := w.span(k)
		if !ok {
			break
		}
		if len(b) == 0 || len(b) > warmChunk {
			t.Fatalf("step %d spans %d bytes", k, len(b))
		}
		got = append(got, b...)
	}
	var want []byte
	steps := 0
	for _, m := range mem {
		want = append(want, m...)
		steps += (len(m) + warmChunk - 1) / warmChunk
	}
	if k != steps || string(got) != string(want) {
		t.Fatalf("%d steps over %d bytes, want %d steps over the %d bytes in order", k, len(got), steps, len(want))
	}
}

// TestWarm: an idle worker reads a warm task through and drops it; jobs published while
// it warms run complete; stopWarm returns with no worker reading the task's memory.
func TestWarm(t *testing.T) {
	var c Crew
	c.Run(2, 2, 1, func(lo, hi int) {}) // a worker, idle now
	c.warm.Store(NewWarmTask(make([]byte, 64<<20)))
	var total atomic.Int64
	for range 20 {
		c.Run(1000, 8, 1, func(lo, hi int) { total.Add(int64(hi - lo)) })
		time.Sleep(50 * time.Microsecond)
	}
	if total.Load() != 20*1000 {
		t.Fatalf("calls made while warming computed %d of %d", total.Load(), 20*1000)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.warm.Load() != nil && time.Now().Before(deadline) {
		c.Run(2, 2, 1, func(lo, hi int) {}) // keep the worker alive past Linger
		time.Sleep(100 * time.Microsecond)
	}
	if w := c.warm.Load(); w != nil {
		t.Fatalf("the warm task is still set after 5 s, %d steps taken", w.next.Load())
	}
	c.warm.Store(NewWarmTask(make([]byte, 64<<20)))
	time.Sleep(100 * time.Microsecond)
	c.stopWarm()
	if c.warm.Load() != nil || c.warming.Load() != 0 {
		t.Fatalf("after stopWarm: task %v, %d workers warming", c.warm.Load(), c.warming.Load())
	}
}
