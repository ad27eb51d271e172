package compute

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// refSigmoidRoute is DeepSeek-V3's router written out as transformers writes it: sigmoid
// scores, the correction bias for the choice, group scores from each group's two best,
// the other groups masked to -inf, a stable sort for the top k, the unbiased scores as
// weights, renormalised (+1e-20) and scaled, in float64.
func refSigmoidRoute(logits, bias []float32, groups, topGroups, k int, norm bool, scale float64) ([]int, []float64) {
	n := len(logits)
	score, choice := make([]float64, n), make([]float64, n)
	for i, l := range logits {
		score[i] = 1 / (1 + math.Exp(-float64(l)))
		choice[i] = score[i] + float64(bias[i])
	}
	if groups > 1 {
		size := n / groups
		gs := make([]float64, groups)
		for g := range gs {
			v := slices.Clone(choice[g*size : (g+1)*size])
			sort.Sort(sort.Reverse(sort.Float64Slice(v)))
			gs[g] = v[0] + v[1]
		}
		order := make([]int, groups)
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return gs[order[a]] > gs[order[b]] })
		for _, g := range order[topGroups:] {
			for i := g * size; i < (g+1)*size; i++ {
				choice[i] = math.Inf(-1)
			}
		}
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return choice[idx[a]] > choice[idx[b]] })
	idx = idx[:k]
	w := make([]float64, k)
	var sum float64
	for i, e := range idx {
		w[i] = score[e]
		sum += w[i]
	}
	for i := range w {
		if norm {
			w[i] /= sum + 1e-20
		}
		w[i] *= scale
	}
	return idx, w
}

func TestSigmoidRoutingMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct{ experts, groups, topGroups, k int }{
		{64, 1, 1, 4}, {16, 4, 2, 3}, {32, 8, 4, 8}, {6, 3, 2, 2}, {8, 0, 0, 8},
	} {
		for trial := 0; trial < 200; trial++ {
			logits, bias := make([]float32, c.experts), make([]float32, c.experts)
			for i := range logits {
				logits[i] = float32(r.NormFloat64() * 2)
				bias[i] = float32(r.NormFloat64() * 0.3)
				if trial%7 == 0 {
					logits[i] = float32(r.IntN(3)) // ties
					bias[i] = 0
				}
			}
			norm := trial%2 == 0
			rt := Routing{TopK: c.k, NormTopK: norm, Sigmoid: true, Bias: bias, Groups: c.groups, TopKGroups: c.topGroups, Scale: 2.5}
			if err := rt.Check(c.experts); err != nil {
				t.Fatal(err)
			}
			got, gw := rt.Select(logits)
			want, ww := refSigmoidRoute(logits, bias, c.groups, c.topGroups, c.k, norm, 2.5)
			if !slices.Equal(got, want) {
				t.Fatalf("%+v trial %d: experts %v, want %v", c, trial, got, want)
			}
			for i := range gw {
				if math.Abs(float64(gw[i])-ww[i]) > 1e-6*math.Max(1, ww[i]) {
					t.Fatalf("%+v trial %d: weights %v, want %v", c, trial, gw, ww)
				}
			}
		}
	}
	if err := (Routing{TopK: 3, Sigmoid: true, Groups: 4, TopKGroups: 1}).Check(8); err == nil {
		t.Error("3 experts from one group of 2: no error")
	}
	if err := (Routing{TopK: 2, Sigmoid: true, Bias: make([]float32, 3)}).Check(8); err == nil {
		t.Error("3 biases for 8 experts: no error")
	}
}
