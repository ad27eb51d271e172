package sample

import (
	"math"
	"testing"
)

// chiSquare999 is the 0.999 quantile of the chi-square distribution by degrees of freedom
// (a correct sampler fails one case in a thousand; the seeds are fixed, so a run either
// always passes or always fails).
var chiSquare999 = map[int]float64{1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32}

// SampleDraft's tokens are distributed as the sampler's distribution, whichever token is
// drafted (likely, unlikely, filtered out by top_k or top_p), with penalties, top_k,
// top_p and min_p: a chi-square test over 20,000 draws per case.
func TestSampleDraftDistribution(t *testing.T) {
	logits := []float32{2.0, 1.5, 1.4, 0.3, -0.5, 0.9, -2, 1.0}
	history := []int32{1, 1, 5}
	cases := []Options{
		{Temperature: 1, RepeatPenalty: 1},
		{Temperature: 0.7, TopK: 5, TopP: 0.95, RepeatPenalty: 1.3, RepeatLastN: 64, PresencePenalty: 0.2},
		{Temperature: 1.5, TopP: 0.8, MinP: 0.05, RepeatPenalty: 1},
	}
	const draws = 20000
	for ci, o := range cases {
		o.Seed = int64(100 + ci)
		s, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		s.Accept(history...)
		// The target: Sample's distribution, renormalised over what the filters keep.
		p := make([]float64, len(logits))
		var sum float64
		for _, tk := range s.dist(logits, s.penalties(logits)) {
			p[tk.id] = float64(tk.value)
			sum += float64(tk.value)
		}
		for i := range p {
			p[i] /= sum
		}
		for draft := int32(0); draft < int32(len(logits)); draft++ {
			counts := make([]int, len(logits))
			kept := 0
			for range draws {
				id, ok, err := s.SampleDraft(logits, draft)
				if err != nil {
					t.Fatal(err)
				}
				if ok != (id == draft) {
					t.Fatalf("case %d: SampleDraft returned %d with accepted %v for draft %d", ci, id, ok, draft)
				}
				if ok {
					kept++
				}
				counts[id]++
			}
			var chi float64
			df := -1
			for i, c := range counts {
				if p[i] == 0 {
					if c != 0 {
						t.Fatalf("case %d, draft %d: token %d has probability 0 and came %d times", ci, draft, i, c)
					}
					continue
				}
				e := p[i] * draws
				chi += (float64(c) - e) * (float64(c) - e) / e
				df++
			}
			if chi > chiSquare999[df] {
				t.Errorf("case %d, draft %d: chi-square %.1f over %d degrees of freedom (> %.1f): counts %v, p %v", ci, draft, chi, df, chiSquare999[df], counts, p)
			}
			// The draft is kept with its probability.
			if want := p[draft] * draws; math.Abs(float64(kept)-want) > 4*math.Sqrt(want*(1-p[draft])+1) {
				t.Errorf("case %d, draft %d: kept %d times, expected %.0f", ci, draft, kept, want)
			}
		}
	}
}

// Greedy, SampleDraft returns the argmax (penalties applied), accepting a draft that is it.
func TestSampleDraftGreedy(t *testing.T) {
	s, _ := New(Options{Temperature: 0, RepeatPenalty: 1})
	logits := []float32{0.1, 3, 2}
	if id, ok, _ := s.SampleDraft(logits, 1); id != 1 || !ok {
		t.Fatalf("draft of the argmax: %d %v", id, ok)
	}
	if id, ok, _ := s.SampleDraft(logits, 2); id != 1 || ok {
		t.Fatalf("draft of another token: %d %v", id, ok)
	}
}

// SampleDraftFrom, given drafts drawn from a draft model's distribution q, returns tokens
// distributed as the target's p (chi-square over 20,000 draws per case), for a q close to
// p, one far from it, and one that misses tokens p has.
func TestSampleDraftFromDistribution(t *testing.T) {
	logits := []float32{2.0, 1.5, 1.4, 0.3, -0.5, 0.9, -2, 1.0}
	qs := map[string][]float32{
		"close":   {2.1, 1.4, 1.4, 0.2, -0.4, 1.0, -2, 0.9},
		"far":     {-1, 0.5, 3, 2, 0.1, -1, 1, -2},
		"missing": {5, 4, -30, -30, 3, -30, -30, -30},
	}
	const draws = 20000
	for name, ql := range qs {
		target, _ := New(Options{Temperature: 0.9, TopK: 6, TopP: 0.97, RepeatPenalty: 1.2, RepeatLastN: 8, Seed: 7})
		target.Accept(1, 5)
		drafter, _ := New(Options{Temperature: 1, TopP: 1, RepeatPenalty: 1, Seed: 8})
		q, err := drafter.Distribution(ql)
		if err != nil {
			t.Fatal(err)
		}
		p, err := target.Distribution(logits)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float64, len(logits))
		for _, tp := range p {
			want[tp.ID] = tp.Prob
		}
		counts := make([]int, len(logits))
		kept := 0
		for range draws {
			d, err := drafter.Sample(ql)
			if err != nil {
				t.Fatal(err)
			}
			id, ok, err := target.SampleDraftFrom(logits, d, q)
			if err != nil {
				t.Fatal(err)
			}
			if ok != (id == d) {
				t.Fatalf("%s: returned %d, accepted %v, for draft %d", name, id, ok, d)
			}
			if ok {
				kept++
			}
			counts[id]++
		}
		var chi float64
		df := -1
		for i, c := range counts {
			if want[i] == 0 {
				if c != 0 {
					t.Fatalf("%s: token %d has probability 0 and came %d times", name, i, c)
				}
				continue
			}
			e := want[i] * draws
			chi += (float64(c) - e) * (float64(c) - e) / e
			df++
		}
		if chi > chiSquare999[df] {
			t.Errorf("%s: chi-square %.1f over %d degrees of freedom (> %.1f): counts %v, p %v", name, chi, df, chiSquare999[df], counts, want)
		}
		t.Logf("%s: %d of %d drafts kept, chi-square %.1f over %d degrees of freedom", name, kept, draws, chi, df)
	}
}
