package sample

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// naiveLogSoftmax is log(exp(x_i) / Σ exp(x_j)) in float64, written the long way.
func naiveLogSoftmax(logits []float32) []float64 {
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v))
	}
	out := make([]float64, len(logits))
	for i, v := range logits {
		out[i] = math.Log(math.Exp(float64(v)) / sum)
	}
	return out
}

func TestLogprobsMatchLogSoftmax(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 7, 1000, 151936} {
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(r.NormFloat64() * 4)
		}
		want := naiveLogSoftmax(logits)
		for _, top := range []int{0, 1, 5, 20, 50} {
			id := int32(r.IntN(n))
			lp := Logprobs(logits, id, top)
			if lp.ID != id || math.Abs(lp.Logprob-want[id]) > 1e-9 {
				t.Fatalf("n=%d id %d: logprob %v, want %v", n, id, lp.Logprob, want[id])
			}
			ids := make([]int, n)
			for i := range ids {
				ids[i] = i
			}
			sort.SliceStable(ids, func(a, b int) bool { return want[ids[a]] > want[ids[b]] })
			wantTop := min(top, MaxTopLogprobs, n)
			if len(lp.Top) != wantTop {
				t.Fatalf("n=%d top=%d: %d entries, want %d", n, top, len(lp.Top), wantTop)
			}
			for k, e := range lp.Top {
				if int(e.ID) != ids[k] || math.Abs(e.Logprob-want[ids[k]]) > 1e-9 {
					t.Fatalf("n=%d top=%d: entry %d is %+v, want id %d logprob %v", n, top, k, e, ids[k], want[ids[k]])
				}
			}
		}
	}
}

func TestLogprobsProbabilitiesSumToOne(t *testing.T) {
	logits := []float32{3, 1, -2, 0.5, 3}
	var sum float64
	for i := range logits {
		sum += math.Exp(Logprobs(logits, int32(i), 0).Logprob)
	}
	if math.Abs(sum-1) > 1e-12 {
		t.Fatalf("probabilities sum to %v", sum)
	}
	// Ties rank the lower id first.
	top := Logprobs(logits, 0, 3).Top
	if top[0].ID != 0 || top[1].ID != 4 || top[2].ID != 1 || top[0].Logprob != top[1].Logprob {
		t.Fatalf("top %+v", top)
	}
}

// Large logits do not overflow; masked (-Inf) tokens have probability 0 and rank last.
func TestLogprobsExtremes(t *testing.T) {
	inf := float32(math.Inf(-1))
	logits := []float32{1000, 999, inf, inf}
	lp := Logprobs(logits, 1, 4)
	want := 999 - (1000 + math.Log(1+math.Exp(-1)))
	if math.Abs(lp.Logprob-want) > 1e-9 {
		t.Fatalf("logprob %v, want %v", lp.Logprob, want)
	}
	if !math.IsInf(Logprobs(logits, 2, 0).Logprob, -1) {
		t.Fatal("a masked token must have log-probability -Inf")
	}
	if lp.Top[0].ID != 0 || lp.Top[1].ID != 1 || !math.IsInf(lp.Top[2].Logprob, -1) {
		t.Fatalf("top %+v", lp.Top)
	}
	if lp := Logprobs(logits, 7, 0); !math.IsInf(lp.Logprob, -1) {
		t.Fatalf("an id outside the vocabulary: %v", lp.Logprob)
	}
}
