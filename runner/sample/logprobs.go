package sample

import (
	"math"
	"slices"
)

// MaxTopLogprobs is the most alternatives Logprobs reports per position (OpenAI's and
// Ollama's limit).
const MaxTopLogprobs = 20

// TokenLogprob is a token id and its log-probability.
type TokenLogprob struct {
	ID      int32
	Logprob float64
}

// Logprob is a sampled token's log-probability and the most likely tokens at its
// position.
type Logprob struct {
	TokenLogprob
	Top []TokenLogprob // highest first (ties: lower id first); nil when none were asked for
}

// Logprobs returns the log-probability of token id under logits (the log-softmax of
// the raw logits, before penalties, temperature or any other sampling transform, in
// float64) and the top most likely tokens (at most MaxTopLogprobs). Tokens whose logit
// is -Inf (masked) have probability 0; a NaN logit makes every value NaN.
func Logprobs(logits []float32, id int32, top int) Logprob {
	m := math.Inf(-1)
	for _, v := range logits {
		m = max(m, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - m)
	}
	lse := m + math.Log(sum) // log Σ exp(logit)
	lp := Logprob{TokenLogprob: TokenLogprob{ID: id, Logprob: math.Inf(-1)}}
	if id >= 0 && int(id) < len(logits) {
		lp.Logprob = float64(logits[id]) - lse
	}
	top = min(top, MaxTopLogprobs, len(logits))
	if top <= 0 {
		return lp
	}
	// The top entries by a small insertion-sorted list: top is at most 20.
	better := func(a, b TokenLogprob) bool { // a ranks before b
		return a.Logprob > b.Logprob || a.Logprob == b.Logprob && a.ID < b.ID
	}
	best := make([]TokenLogprob, 0, top+1)
	for i, v := range logits {
		t := TokenLogprob{ID: int32(i), Logprob: float64(v)}
		if len(best) == top && !better(t, best[top-1]) {
			continue
		}
		at, _ := slices.BinarySearchFunc(best, t, func(e, t TokenLogprob) int {
			if better(e, t) {
				return -1
			}
			return 1
		})
		best = slices.Insert(best, at, t)
		if len(best) > top {
			best = best[:top]
		}
	}
	for i := range best {
		best[i].Logprob -= lse
	}
	lp.Top = best
	return lp
}
