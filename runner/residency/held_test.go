package residency

import "testing"

// TestHeldCopies: Hit counts a use served from a caller's copy as a hit without reading,
// and Victim picks by the policy from those uses: under LRU the least recently used,
// under LFU the least used.
func TestHeldCopies(t *testing.T) {
	path, _ := testFile(t, 4096)
	for _, p := range []Policy{LRU, LFU, Frequency} {
		m := New(Options{Budget: 1 << 20, Policy: p, Workers: 1})
		var ids []int
		for u := range 3 {
			id, err := m.Add([]Segment{{path, int64(u * 1000), 100}})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		// Unit 0 used three times long ago, unit 1 once, unit 2 twice, most recently.
		for _, id := range []int{0, 0, 0, 1, 2, 2} {
			m.Hit(ids[id])
		}
		s := m.Stats()
		if s.Hits != 6 || s.Misses != 0 || s.Reads != 0 {
			t.Errorf("%v: stats %+v", p, s)
		}
		want := map[Policy]int{LRU: 0, LFU: 1, Frequency: 1}[p]
		if v := m.Victim(ids); v != want {
			t.Errorf("%v: victim %d, want %d", p, v, want)
		}
		if v := m.Victim([]int{ids[2]}); v != 0 {
			t.Errorf("%v: victim of one is %d", p, v)
		}
		if v := m.Victim(nil); v != -1 {
			t.Errorf("%v: victim of none is %d", p, v)
		}
		m.Close()
	}
}
