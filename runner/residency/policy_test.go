package residency

import (
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

// routingTrace draws a routing trace of a layers × experts MoE picking topK per token:
// each layer has a popularity per expert (log-normal of spread sigma: 0 is uniform), and
// each of a token's picks at a layer repeats one of the previous token's there with
// probability repeat. A phase change every shift tokens (0: never) draws new
// popularities, as a change of topic does. The result is unit ids, layer·experts + e,
// in the order a pass uses them.
func routingTrace(seed uint64, layers, experts, topK, tokens int, sigma, repeat float64, shift int) []int {
	r := rand.New(rand.NewPCG(seed, 7))
	pop := make([][]float64, layers)
	draw := func() {
		for l := range pop {
			pop[l] = make([]float64, experts)
			for e := range pop[l] {
				pop[l][e] = math.Exp(sigma * r.NormFloat64())
			}
		}
	}
	draw()
	prev := make([][]int, layers)
	taken := make([]bool, experts)
	var trace []int
	for t := range tokens {
		if shift > 0 && t > 0 && t%shift == 0 {
			draw()
		}
		for l := range layers {
			var picks []int
			clear(taken)
			var sum float64
			for _, w := range pop[l] {
				sum += w
			}
			for _, e := range prev[l] {
				if r.Float64() < repeat {
					picks = append(picks, e)
					taken[e] = true
					sum -= pop[l][e]
				}
			}
			for len(picks) < topK {
				x := r.Float64() * sum
				pick := -1
				for e, w := range pop[l] {
					if taken[e] {
						continue
					}
					pick = e
					if x -= w; x <= 0 {
						break
					}
				}
				picks = append(picks, pick)
				taken[pick] = true
				sum -= pop[l][pick]
			}
			for _, e := range picks {
				trace = append(trace, l*experts+e)
			}
			prev[l] = picks
		}
	}
	return trace
}

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
		{"qwen-like", 1.3, 0.42, 0},
		{"qwen-like, topic shifts", 1.3, 0.42, 200},
		{"near-uniform", 0.3, 0.04, 0},
	}
	shares := []float64{0.38}
	if os.Getenv("MLXG_POLICY_SWEEP") != "" {
		shares = []float64{0.25, 0.38, 0.5}
	}
	for _, c := range cases {
		trace := routingTrace(1, layers, experts, topK, tokens, c.sigma, c.repeat, c.shift)
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
