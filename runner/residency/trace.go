package residency

import (
	"math"
	"math/rand/v2"
)

// Routing is how a synthetic routing trace picks experts (Trace).
type Routing struct {
	Sigma  float64 // spread of the log-normal popularity of the experts of a layer
	Repeat float64 // probability that a pick of the previous token is picked again
	Shift  int     // tokens between changes of popularity (0: never)
}

// QwenLike is routing with Qwen3-30B-A3B's published locality: about half of a token's
// picks repeat at the next token, and an LRU holding 38% of the experts hits about 80%.
var QwenLike = Routing{Sigma: 1.3, Repeat: 0.42}

// NearUniform is routing with little locality: about 10% of the picks repeat.
var NearUniform = Routing{Sigma: 0.3, Repeat: 0.04}

// TraceShape is the model and length of a synthetic trace.
type TraceShape struct {
	Layers, Experts, TopK, Tokens int
	Routing                       Routing
}

// ExpectedHitRate simulates the policy's hit rate for an expert cache holding share of
// the experts under routing r, on a trace of the model's shape (at most 8 layers: the
// share per layer is what matters).
func ExpectedHitRate(layers, experts, topK int, share float64, r Routing, p Policy) float64 {
	s := TraceShape{Layers: min(layers, 8), Experts: experts, TopK: topK, Tokens: 200, Routing: r}
	trace := Trace(1, s)
	units := s.Layers * experts
	return float64(Simulate(trace, units, int(share*float64(units)), p, 0)) / float64(len(trace))
}

// Trace draws a routing trace of a Layers × Experts MoE picking TopK per token: each
// layer has a popularity per expert (log-normal of spread Sigma: 0 is uniform), and each of
// the previous token's picks at a layer is picked again with probability Repeat. A phase
// change every Shift tokens (0: never) draws new
// popularities, as a change of topic does. The result is unit ids, layer·experts + e,
// in the order a pass uses them.
func Trace(seed uint64, s TraceShape) []int {
	layers, experts, topK, tokens := s.Layers, s.Experts, s.TopK, s.Tokens
	sigma, repeat, shift := s.Routing.Sigma, s.Routing.Repeat, s.Routing.Shift
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
