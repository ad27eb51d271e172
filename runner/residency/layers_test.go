package residency

import (
	"bytes"
	"slices"
	"testing"
)

// TestKeepLayers: every layer is kept when all fit; else as many as fit beside room for
// two of the largest, the streamed ones spread over the pass.
func TestKeepLayers(t *testing.T) {
	ones := func(n int) []int64 {
		s := make([]int64, n)
		for i := range s {
			s[i] = 1
		}
		return s
	}
	for _, tc := range []struct {
		sizes    []int64
		avail    int64
		streamed []int
	}{
		{ones(10), 10, nil},
		{ones(10), 9, []int{1, 5, 8}},
		{ones(10), 5, []int{0, 2, 3, 5, 6, 7, 9}},
		{ones(10), 2, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{ones(4), -1, []int{0, 1, 2, 3}},
		{[]int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 3}, 11, []int{1, 3, 5, 7, 9}}, // room for two of the largest
	} {
		keep := KeepLayers(tc.sizes, tc.avail)
		var streamed []int
		for i, k := range keep {
			if !k {
				streamed = append(streamed, i)
			}
		}
		if !slices.Equal(streamed, tc.streamed) {
			t.Errorf("sizes %v, %d available: streamed %v, want %v", tc.sizes, tc.avail, streamed, tc.streamed)
		}
	}
}

// TestLayerCycle: passes over ten layers under a budget of six keep four layers, read
// only the six others per pass, ahead of their use once the first pass is over, never
// exceed the budget, and hand back the file's bytes.
func TestLayerCycle(t *testing.T) {
	path, data := testFile(t, 1<<16)
	const unit = 1024 + 64 // the segments, each aligned
	m := New(Options{Budget: 6 * unit, Workers: 2, Buffered: true})
	defer m.Close()
	var layers [][]Segment
	for i := range 10 {
		layers = append(layers, []Segment{{path, int64(i * 1024), 1000}, {path, int64(i*1024 + 1000), 24}})
	}
	ids, err := m.AddLayers(layers)
	if err != nil {
		t.Fatal(err)
	}
	if kept, n := m.KeptLayers(); kept != 4 || n != 10 {
		t.Fatalf("%d of %d kept, want 4", kept, n)
	}
	const passes = 5
	var afterFirst Stats
	for p := range passes {
		if p == 1 {
			afterFirst = m.Stats()
		}
		for i, id := range ids {
			m.EnterLayer(i)
			h, err := m.Acquire(id)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(h.Seg(0), data[i*1024:i*1024+1000]) || !bytes.Equal(h.Seg(1), data[i*1024+1000:i*1024+1024]) {
				t.Fatalf("layer %d: bytes differ from the file", i)
			}
			h.Release()
		}
	}
	s := m.Stats()
	if s.Peak > s.Budget {
		t.Errorf("peak %d over the budget %d", s.Peak, s.Budget)
	}
	reads := s.Reads - afterFirst.Reads
	// A pass's last layer reads the next pass's first streamed one ahead.
	if reads < 6*(passes-1)-1 || reads > 6*(passes-1)+1 {
		t.Errorf("%d reads after the first pass, want %d (±1: read ahead across passes)", reads, 6*(passes-1))
	}
	if s.PrefetchIssued == 0 || s.PrefetchUseful < s.PrefetchIssued-1 {
		t.Errorf("read-ahead issued %d, used %d", s.PrefetchIssued, s.PrefetchUseful)
	}
	// A smaller budget drops kept layers at once; a larger one keeps them all.
	m.SetBudget(3 * unit)
	if kept, _ := m.KeptLayers(); kept != 1 || m.Stats().Resident > 3*unit {
		t.Errorf("budget of 3: %d kept, %d resident", kept, m.Stats().Resident)
	}
	m.SetBudget(1 << 20)
	if kept, _ := m.KeptLayers(); kept != 10 {
		t.Errorf("budget of all: %d kept", kept)
	}
}
