package residency

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// testFile writes n random bytes and returns the path and the bytes.
func testFile(t *testing.T, n int) (string, []byte) {
	t.Helper()
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	p := filepath.Join(t.TempDir(), "w.bin")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, b
}

// TestReadEvictReload: under a budget of two units out of eight, every unit read back
// after eviction has its file's bytes, segments in place; counters add up.
func TestReadEvictReload(t *testing.T) {
	for _, buffered := range []bool{true, false} {
		readEvictReload(t, buffered)
	}
}

func readEvictReload(t *testing.T, buffered bool) {
	path, data := testFile(t, 1<<16)
	const units = 8
	m := New(Options{Budget: 1 << 30, Workers: 3, Buffered: buffered})
	defer m.Close()
	var ids []int
	for u := range units {
		// Three segments of odd lengths, as an expert's gate, up and down rows.
		segs := []Segment{{path, int64(u * 4000), 100}, {path, int64(u*4000 + 1000), 333}, {path, int64(u*4000 + 2000), 7}}
		id, err := m.Add(segs)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if st := m.Stats(); true {
		m.SetBudget(2 * st.Total / units)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 200; i++ {
		u := r.IntN(units)
		h, err := m.Acquire(ids[u])
		if err != nil {
			t.Fatal(err)
		}
		for s, want := range [][2]int{{u * 4000, 100}, {u*4000 + 1000, 333}, {u*4000 + 2000, 7}} {
			if !bytes.Equal(h.Seg(s), data[want[0]:want[0]+want[1]]) {
				t.Fatalf("unit %d segment %d differs from the file", u, s)
			}
		}
		h.Release()
	}
	s := m.Stats()
	if s.Hits+s.Misses != 200 || s.Reads != s.Misses || s.Evictions == 0 || s.InMemory > 4 {
		t.Errorf("stats %+v", s)
	}
	if s.Resident > s.Budget {
		t.Errorf("resident %d over the budget %d with nothing in use", s.Resident, s.Budget)
	}
}

// TestBudgetChanges: shrinking evicts at once, units in use stay until released, and a
// larger budget lets the cache grow back.
func TestBudgetChanges(t *testing.T) {
	path, _ := testFile(t, 1<<16)
	m := New(Options{Budget: 1 << 20, Buffered: true})
	defer m.Close()
	for u := range 10 {
		if _, err := m.Add([]Segment{{path, int64(u * 1024), 1024}}); err != nil {
			t.Fatal(err)
		}
	}
	for u := range 10 {
		h, _ := m.Acquire(u)
		h.Release()
	}
	if s := m.Stats(); s.InMemory != 10 {
		t.Fatalf("%d units in memory under a large budget", s.InMemory)
	}
	held, _ := m.Acquire(9)
	m.SetBudget(3 * 1024)
	if s := m.Stats(); s.InMemory != 3 || s.Resident != 3*1024 {
		t.Fatalf("after shrinking: %d in memory, %d bytes", s.InMemory, s.Resident)
	}
	m.SetBudget(0)
	if s := m.Stats(); s.InMemory != 1 {
		t.Fatalf("budget 0 with one unit held: %d in memory", s.InMemory)
	}
	held.Release()
	if s := m.Stats(); s.InMemory != 0 {
		t.Fatalf("budget 0, nothing held: %d in memory", s.InMemory)
	}
	m.SetBudget(5 * 1024)
	for u := range 10 {
		h, _ := m.Acquire(u)
		h.Release()
	}
	if s := m.Stats(); s.InMemory != 5 {
		t.Fatalf("grown back to 5 units: %d in memory", s.InMemory)
	}
	m.Pin(2 * 1024)
	if s := m.Stats(); s.InMemory != 3 {
		t.Fatalf("pinning 2 units' worth: %d in memory", s.InMemory)
	}
}

// TestPrefetch: a read-ahead counts as issued, its use as useful; a read-ahead never
// evicts a unit used after the one it reads was last used.
func TestPrefetch(t *testing.T) {
	path, data := testFile(t, 1<<16)
	m := New(Options{Budget: 2 * 1024, Policy: LRU, Buffered: true})
	defer m.Close()
	for u := range 4 {
		m.Add([]Segment{{path, int64(u * 1024), 1024}})
	}
	m.Prefetch(0, 1)
	h, err := m.Acquire(0)
	if err != nil || !bytes.Equal(h.Seg(0), data[:1024]) {
		t.Fatal(err)
	}
	h.Release()
	s := m.Stats()
	if s.PrefetchIssued != 2 || s.PrefetchUseful != 1 {
		t.Fatalf("stats %+v", s)
	}
	// 0 was just used; 2 and 3 never: a read-ahead of 2 may push out the unused
	// read-ahead 1 but not 0.
	m.Prefetch(2, 3)
	h, _ = m.Acquire(0)
	h.Release()
	if s := m.Stats(); s.Hits != 1 {
		t.Fatalf("unit 0 was evicted by a read-ahead: %+v", s)
	}
}

// TestConcurrent: several goroutines acquiring under a tiny budget see the right bytes
// (run with -race).
func TestConcurrent(t *testing.T) {
	path, data := testFile(t, 1<<16)
	m := New(Options{Budget: 3 * 512, Workers: 2, Buffered: true})
	defer m.Close()
	for u := range 16 {
		m.Add([]Segment{{path, int64(u * 512), 512}})
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for range 100 {
				u := r.IntN(16)
				if r.IntN(4) == 0 {
					m.Prefetch(r.IntN(16))
				}
				h, err := m.Acquire(u)
				if err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(h.Seg(0), data[u*512:(u+1)*512]) {
					t.Errorf("unit %d differs", u)
				}
				h.Release()
			}
		}()
	}
	wg.Wait()
}

// TestBadFile: a read past the end of the file is an error, and the unit can be
// acquired again (it is not left half-read).
func TestBadFile(t *testing.T) {
	path, _ := testFile(t, 100)
	m := New(Options{Budget: 1 << 20})
	defer m.Close()
	id, _ := m.Add([]Segment{{path, 50, 100}})
	for range 2 {
		if _, err := m.Acquire(id); err == nil {
			t.Fatal("reading past the end succeeded")
		}
	}
	if _, err := m.Add([]Segment{{filepath.Join(t.TempDir(), "missing"), 0, 1}}); err == nil {
		t.Fatal("a missing file was accepted")
	}
}

// TestWantIsAMiss: a unit read because a pass asked for it counts as a miss when the
// pass acquires it, even if the read is over by then.
func TestWantIsAMiss(t *testing.T) {
	path, _ := testFile(t, 1<<12)
	m := New(Options{Budget: 1 << 20})
	defer m.Close()
	m.Add([]Segment{{path, 0, 100}})
	m.Want(0)
	for !m.Resident(0) {
		time.Sleep(time.Millisecond)
	}
	h, _ := m.Acquire(0)
	h.Release()
	h, _ = m.Acquire(0)
	h.Release()
	if s := m.Stats(); s.Misses != 1 || s.Hits != 1 {
		t.Errorf("stats %+v, want one miss then one hit", s)
	}
}

// TestExpect: a confident guess evicts the policy's victim (not a unit in use), is kept
// against reads a pass waits for until Settle, counts as a miss and as useful at its
// first use, and a settled guess nobody used is the first to go.
func TestExpect(t *testing.T) {
	path, data := testFile(t, 1<<16)
	m := New(Options{Budget: 3 * 1024, Policy: LRU, Buffered: true})
	defer m.Close()
	for u := range 6 {
		m.Add([]Segment{{path, int64(u * 1024), 1024}})
	}
	use := func(u int) {
		t.Helper()
		h, err := m.Acquire(u)
		if err != nil || !bytes.Equal(h.Seg(0), data[u*1024:(u+1)*1024]) {
			t.Fatalf("unit %d: %v", u, err)
		}
		h.Release()
	}
	use(0)
	use(1)
	use(2)
	held, _ := m.Acquire(2)
	// The cache is full: guessing 3 and 4 evicts 0 and 1 (LRU), never the held 2.
	m.Expect(3, 4)
	for !m.Resident(3) || !m.Resident(4) {
		time.Sleep(time.Millisecond)
	}
	if m.Resident(0) || m.Resident(1) || !m.Resident(2) {
		t.Fatal("the guesses evicted the wrong units")
	}
	held.Release()
	// A read a pass waits for evicts 2, the only unit not expected.
	use(5)
	if !m.Resident(3) || !m.Resident(4) || m.Resident(2) {
		t.Fatal("a demand read evicted an expected unit")
	}
	s := m.Stats()
	use(3)
	if d := m.Stats(); d.Misses != s.Misses+1 || d.PrefetchUseful != s.PrefetchUseful+1 || d.PrefetchIssued != 2 {
		t.Fatalf("first use of a guessed unit: %+v then %+v", s, d)
	}
	m.Settle(3, 4)
	// 4 was guessed and not used: the next read evicts it before 5 and 3.
	use(0)
	if m.Resident(4) || !m.Resident(3) || !m.Resident(5) {
		t.Fatal("a settled, unused guess was not the first to go")
	}
	// With every resident unit expected, a guess that does not fit is skipped.
	m.Expect(3, 5, 0)
	m.Expect(1)
	if s := m.Stats(); s.PrefetchIssued != 2 || s.Pinned+s.Resident > s.Budget || m.Resident(1) {
		t.Fatalf("a guess that did not fit: %+v", s)
	}
}

// TestDirectReads: where the file system allows O_DIRECT, units are read directly as
// aligned ranges, their data as aligned in the buffer as in the file, up to a file's
// end that is not aligned; the bytes are the file's.
func TestDirectReads(t *testing.T) {
	if directAlign == 0 {
		t.Skip("no direct reads on this system")
	}
	path, data := testFile(t, 3*directAlign+1000)
	m := New(Options{Budget: 1 << 30})
	defer m.Close()
	segs := []Segment{{path, 10, 100}, {path, directAlign - 8, 30}, {path, 2 * directAlign, directAlign}, {path, 3*directAlign + 900, 100}, {path, 5, 0}}
	id, err := m.Add(segs)
	if err != nil {
		t.Fatal(err)
	}
	if !m.units[id].direct {
		t.Skip("the file system refused O_DIRECT")
	}
	for range 2 {
		h, err := m.Acquire(id)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range segs {
			if !bytes.Equal(h.Seg(i), data[s.Off:s.Off+s.Len]) {
				t.Fatalf("segment %d differs from the file", i)
			}
			if s.Len > 0 && int(uintptr(unsafe.Pointer(&h.Seg(i)[0])))%directAlign != int(s.Off%directAlign) {
				t.Fatalf("segment %d is not aligned as in the file", i)
			}
		}
		h.Release()
		m.SetBudget(0)
		m.SetBudget(1 << 30)
	}
	if s := m.Stats(); s.Reads != 2 || s.BytesRead != 2*(4*directAlign+1000) {
		t.Errorf("stats %+v, want two reads of the aligned ranges", s)
	}
	// A read past the end of the file fails, directly too.
	bad, _ := m.Add([]Segment{{path, 3 * directAlign, 2000}})
	if _, err := m.Acquire(bad); err == nil {
		t.Fatal("reading past the end succeeded")
	}
}

// TestLend: lent bytes let more units stay beyond the budget; taking them back evicts
// at once down to the budget, except a unit in use, and frees what it evicted; a
// dense model's manager borrows nothing.
func TestLend(t *testing.T) {
	path, data := testFile(t, 1<<16)
	m := New(Options{Budget: 2 * 1024, Policy: LRU, Buffered: true})
	defer m.Close()
	for u := range 6 {
		if _, err := m.Add([]Segment{{path, int64(u * 1024), 1024}}); err != nil {
			t.Fatal(err)
		}
	}
	use := func(ids ...int) {
		for _, id := range ids {
			h, err := m.Acquire(id)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(h.Seg(0), data[id*1024:(id+1)*1024]) {
				t.Fatalf("unit %d differs from the file", id)
			}
			h.Release()
		}
	}
	m.Lend(2 * 1024)
	use(0, 1, 2, 3)
	if s := m.Stats(); s.InMemory != 4 || s.Lent != 2*1024 || s.Budget != 2*1024 {
		t.Fatalf("with 2 units lent: %d in memory, lent %d, budget %d", s.InMemory, s.Lent, s.Budget)
	}
	use(4) // evicts 0, the least recently used
	if m.Resident(0) || !m.Resident(4) {
		t.Error("a read beyond budget and loan did not evict the least recently used")
	}
	held, err := m.Acquire(1)
	if err != nil {
		t.Fatal(err)
	}
	m.Lend(0)
	if s := m.Stats(); s.InMemory != 2 || s.Resident != 2*1024 || !m.Resident(1) {
		t.Fatalf("loan taken back with unit 1 held: %d in memory (%d bytes), unit 1 resident %v", s.InMemory, s.Resident, m.Resident(1))
	}
	held.Release()
	use(5, 0)
	if s := m.Stats(); s.InMemory != 2 || s.Lent != 0 {
		t.Errorf("after the loan: %d in memory, lent %d", s.InMemory, s.Lent)
	}

	d := New(Options{Budget: 1 << 20, Buffered: true})
	defer d.Close()
	if _, err := d.AddLayers([][]Segment{{{path, 0, 1024}}, {{path, 1024, 1024}}}); err != nil {
		t.Fatal(err)
	}
	d.Lend(4096)
	if s := d.Stats(); s.Lent != 0 {
		t.Errorf("a dense model's manager borrowed %d", s.Lent)
	}
}
