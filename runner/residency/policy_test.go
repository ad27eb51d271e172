package residency

import (
	"os"
	"slices"
	"testing"
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
