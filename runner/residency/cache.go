package residency

import (
	"fmt"
	"math"
	"strings"
)

// Policy is how the cache picks the unit to evict.
type Policy int

const (
	// Frequency scores a unit by its uses, each weighted down by how long ago it was
	// (a half-life counted in uses of the whole cache): an expert the router keeps coming
	// back to stays even when a burst of others passes through, and one that was popular
	// long ago fades out. The default.
	Frequency Policy = iota
	// LRU evicts the unit used least recently.
	LRU
	// LFU evicts the unit used least often since the model was loaded (ties: least
	// recently).
	LFU
)

func (p Policy) String() string {
	switch p {
	case LRU:
		return "lru"
	case LFU:
		return "lfu"
	}
	return "frequency"
}

// ParsePolicy reads a policy's name ("frequency", "lru", "lfu").
func ParsePolicy(s string) (Policy, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "frequency", "freq", "lrfu":
		return Frequency, nil
	case "lru":
		return LRU, nil
	case "lfu":
		return LFU, nil
	}
	return 0, fmt.Errorf("residency: unknown eviction policy %q (want frequency, lru or lfu)", s)
}

// DefaultHalfLife is the Frequency policy's half-life in uses of the cache: a 16-layer
// top-8 MoE makes 128 uses per token, so this is about 8 tokens.
const DefaultHalfLife = 1024

// score is what the policies know of a unit: its uses, kept for units not resident too,
// so that a unit read back in resumes its history.
type score struct {
	last  uint64  // the tick of its last use
	count float64 // uses (LFU), or the decayed sum of uses at last (Frequency)
}

// scorer applies a Policy.
type scorer struct {
	policy   Policy
	halfLife float64
}

// touch records a use at tick now that served uses picks at once (at least 1).
func (p scorer) touch(s *score, now uint64, uses int) {
	w := float64(max(uses, 1))
	switch p.policy {
	case Frequency:
		s.count = s.count*math.Exp2(-float64(now-s.last)/p.halfLife) + w
	default:
		s.count += w
	}
	s.last = now
}

// rank is what eviction compares at tick now: the unit of the lowest rank goes first,
// ties to the least recently used.
func (p scorer) rank(s *score, now uint64) float64 {
	switch p.policy {
	case LRU:
		return float64(s.last)
	case LFU:
		return s.count
	}
	// The decayed count count·2^(-(now-last)/h), in the log domain.
	return logOr(s.count) - float64(now-s.last)/p.halfLife
}

// worse reports whether a should be evicted before b at tick now.
func (p scorer) worse(a, b *score, now uint64) bool {
	ka, kb := p.rank(a, now), p.rank(b, now)
	if ka != kb {
		return ka < kb
	}
	return a.last < b.last
}

func logOr(c float64) float64 {
	if c <= 0 {
		return -1e9
	}
	return math.Log2(c)
}

// Simulate replays a trace of unit uses, in order, through a cache of capacity units
// of equal size under policy, and returns the hits. Traces of recorded routing compare
// the policies with it (the Manager evicts with the same scorer).
func Simulate(trace []int, units, capacity int, policy Policy, halfLife float64) (hits int) {
	if halfLife <= 0 {
		halfLife = DefaultHalfLife
	}
	p := scorer{policy: policy, halfLife: halfLife}
	scores := make([]score, units)
	resident := make([]bool, units)
	var set []int
	for i, u := range trace {
		now := uint64(i + 1)
		if resident[u] {
			hits++
		} else {
			if len(set) >= capacity {
				v, best := 0, p.rank(&scores[set[0]], now)
				for j := 1; j < len(set); j++ {
					s := &scores[set[j]]
					if k := p.rank(s, now); k < best || k == best && s.last < scores[set[v]].last {
						v, best = j, k
					}
				}
				resident[set[v]] = false
				set[v] = set[len(set)-1]
				set = set[:len(set)-1]
			}
			if capacity > 0 {
				resident[u] = true
				set = append(set, u)
			}
		}
		p.touch(&scores[u], now, 1)
	}
	return hits
}
