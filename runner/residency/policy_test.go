package residency

import (
	"os"
	"slices"
	"testing"
	"time"
)

// repeatRate is the share of a token's picks that the previous token made at the layer.
func repeatRate(trace []int, layers, topK int) float64 {
	per := layers * topK
	var rep, n int
	for t := per; t+per <= len(trace); t += per {
		for l := range layers {
			cur, prev := trace[t+l*topK:t+(l+1)*topK], trace[t-per+l*topK:t-per+(l+1)*topK]
			for _, e := range cur {
				if slices.Contains(prev, e) {
					rep++
				}
				n++
			}
		}
	}
	return float64(rep) / float64(n)
}

// TestPolicyTraces compares LRU, LFU and the frequency-aware policy on routing traces
// of the 16-layer, 128-expert, top-8 shape: Qwen3-like locality (about half of the
// picks repeat at the next token, skewed popularity), the same with a change of topic
// every 200 tokens, and near-uniform routing. The hit rates are logged (go test -v
// -run PolicyTraces; MLXG_POLICY_SWEEP=1 adds caches of 25% and 50%); the docs quote
// them.
func TestPolicyTraces(t *testing.T) {
	const layers, experts, topK, tokens = 16, 128, 8, 400
	cases := []struct {
		name          string
		sigma, repeat float64
		shift         int
	}{
		{"qwen-like", QwenLike.Sigma, QwenLike.Repeat, 0},
		{"qwen-like, topic shifts", QwenLike.Sigma, QwenLike.Repeat, 200},
		{"near-uniform", NearUniform.Sigma, NearUniform.Repeat, 0},
	}
	shares := []float64{0.38}
	if os.Getenv("MLXG_POLICY_SWEEP") != "" {
		shares = []float64{0.25, 0.38, 0.5}
	}
	for _, c := range cases {
		trace := Trace(1, TraceShape{Layers: layers, Experts: experts, TopK: topK, Tokens: tokens, Routing: Routing{Sigma: c.sigma, Repeat: c.repeat, Shift: c.shift}})
		rep := repeatRate(trace, layers, topK)
		for _, share := range shares {
			capacity := int(share * layers * experts)
			var rates []float64
			for _, p := range []Policy{LRU, LFU, Frequency} {
				hits := Simulate(trace, layers*experts, capacity, p, 0)
				rates = append(rates, float64(hits)/float64(len(trace)))
			}
			t.Logf("%-24s repeat %.2f  cache %2.0f%%: LRU %.3f  LFU %.3f  frequency %.3f",
				c.name, rep, 100*share, rates[0], rates[1], rates[2])
			for _, h := range rates {
				if h <= 0 || h >= 1 {
					t.Errorf("%s: hit rate %v", c.name, h)
				}
			}
		}
	}
}

// TestWeightedUses: a use serving several picks at once (AcquireUses, a prompt's pass)
// weighs as that many uses in the frequency policies, so that the expert most of a
// prompt's rows picked outlasts the ones a single row picked, even when they were used
// after it; under LRU only the order counts.
func TestWeightedUses(t *testing.T) {
	path, _ := testFile(t, 1<<16)
	for _, c := range []struct {
		p       Policy
		evicted int // the unit the fourth read evicts
	}{{Frequency, 1}, {LFU, 1}, {LRU, 0}} {
		m := New(Options{Budget: 3 * 1024, Policy: c.p, Buffered: true})
		for u := range 4 {
			if _, err := m.Add([]Segment{{path, int64(u * 1024), 1024}}); err != nil {
				t.Fatal(err)
			}
		}
		// A prompt's pass: unit 0 picked by 5 rows, units 1 and 2 by one each, after it.
		for u, rows := range []int{5, 1, 1} {
			h, err := m.AcquireUses(u, rows)
			if err != nil {
				t.Fatal(err)
			}
			h.Release()
		}
		h, err := m.Acquire(3)
		if err != nil {
			t.Fatal(err)
		}
		h.Release()
		for u := range 3 {
			if got, want := m.Resident(u), u != c.evicted; got != want {
				t.Errorf("%v: unit %d resident %v, want %v", c.p, u, got, want)
			}
		}
		if s := m.Stats(); s.Hits+s.Misses != 4 {
			t.Errorf("%v: a weighted use counts as one hit or miss: %+v", c.p, s)
		}
		m.Close()
	}
}

// TestHitUsesScore: HitUses, the use of a copy the caller holds (the MLX slots),
// weighs by its picks too.
func TestHitUsesScore(t *testing.T) {
	path, _ := testFile(t, 1<<16)
	m := New(Options{Budget: 2 * 1024, Policy: Frequency, Buffered: true})
	defer m.Close()
	for u := range 3 {
		m.Add([]Segment{{path, int64(u * 1024), 1024}})
	}
	// Unit 0's copy is held elsewhere and served 4 picks; 1 was used once, later.
	m.HitUses(0, 4)
	m.HitUses(1, 1)
	if v := m.Victim([]int{0, 1}); v != 1 {
		t.Errorf("victim %d of {0 (4 picks), 1 (1 pick, later)}, want 1", v)
	}
}

// TestWantKeepsDecay: an expert read back in on a pass's demand (Want, then Acquire)
// counts one new use on top of its decayed past ones: asking for it must not cancel
// the decay, or every expert read back in would rank as a frequent one and push out
// those in steady use.
func TestWantKeepsDecay(t *testing.T) {
	path, _ := testFile(t, 1<<16)
	m := New(Options{Budget: 1 << 20, Policy: Frequency, HalfLife: 4, Buffered: true})
	defer m.Close()
	for u := range 3 {
		if _, err := m.Add([]Segment{{path, int64(u * 1024), 1024}}); err != nil {
			t.Fatal(err)
		}
	}
	use := func(id, n int) {
		for range n {
			h, err := m.Acquire(id)
			if err != nil {
				t.Fatal(err)
			}
			h.Release()
		}
	}
	use(0, 4)  // popular once
	use(1, 20) // then unit 1 for a long while: 0's uses fade
	m.SetBudget(1024)
	if m.Resident(0) {
		t.Fatal("the faded unit 0 was not the one evicted")
	}
	m.SetBudget(1 << 20)
	use(2, 2) // two recent uses
	m.Want(0)
	use(0, 1) // read back: one recent use on top of faded ones
	if v := m.Victim([]int{0, 2}); v != 0 {
		t.Errorf("victim %d of {0 (read back, 1 recent use), 2 (2 recent uses)}, want 0", v)
	}
}

// TestWantedStays: a unit a pass asked for and has not acquired yet is evicted only when
// nothing else can go, even when the policy ranks it lowest: the reads of the pass's
// next units evict others.
func TestWantedStays(t *testing.T) {
	path, _ := testFile(t, 1<<16)
	m := New(Options{Budget: 2 * 1024, Policy: Frequency, Buffered: true})
	defer m.Close()
	for u := range 3 {
		if _, err := m.Add([]Segment{{path, int64(u * 1024), 1024}}); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		h, _ := m.Acquire(0) // frequent
		h.Release()
	}
	m.Want(1) // never used: the policy's lowest
	for deadline := time.Now().Add(10 * time.Second); !m.Resident(1); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("unit 1 not read")
		}
	}
	m.Want(2)
	if !m.Resident(1) || m.Resident(0) {
		t.Errorf("reading unit 2 evicted the wanted unit 1 (resident %v) rather than 0 (resident %v)", m.Resident(1), m.Resident(0))
	}
	for _, id := range []int{1, 2} {
		h, err := m.Acquire(id)
		if err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
}
