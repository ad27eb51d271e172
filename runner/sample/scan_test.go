package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// referenceSample is Sample written the plain way, without reading logits in place: every
// token copied into a []token, penalties from a map of counts, then the same steps.
func referenceSample(s *Sampler, logits []float32) (int32, error) {
	ts := make([]token, len(logits))
	for i, v := range logits {
		ts[i] = token{int32(i), v}
	}
	o := s.opts
	if n := o.RepeatLastN; n != 0 && len(s.history) > 0 && (o.RepeatPenalty != 1 || o.PresencePenalty != 0 || o.FrequencyPenalty != 0) {
		window := s.history
		if n > 0 && len(window) > n {
			window = window[len(window)-n:]
		}
		counts := map[int32]int{}
		for _, id := range window {
			if id >= 0 && int(id) < len(ts) {
				counts[id]++
			}
		}
		for id, count := range counts {
			ts[id].value = penalty(ts[id].value, count, o.RepeatPenalty, o.PresencePenalty, o.FrequencyPenalty)
		}
	}
	if o.Temperature == 0 {
		best := ts[0]
		for _, t := range ts[1:] {
			if t.value > best.value {
				best = t
			}
		}
		if math.IsNaN(float64(best.value)) {
			return -1, errNaN
		}
		return best.id, nil
	}
	ts = topK(ts, o.TopK)
	temperature(ts, o.Temperature)
	softmax(ts)
	ts = topP(ts, o.TopP)
	ts = minP(ts, o.MinP)
	var sum float32
	for i := range ts {
		sum += ts[i].value
		ts[i].value = sum
	}
	if math.IsNaN(float64(sum)) || sum <= 0 {
		return -1, errNaN
	}
	r := s.rng.Float32() * sum
	i, _ := slices.BinarySearchFunc(ts, r, func(t token, target float32) int {
		if t.value < target {
			return -1
		}
		return 1
	})
	return ts[min(i, len(ts)-1)].id, nil
}

var errNaN = errorString("no usable output")

type errorString string

func (e errorString) Error() string { return string(e) }

// Sample picks the same token as the copying implementation, step after step from the
// same seed, over random logits (with ties, -Inf and NaN among them) and random options.
func TestSampleMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	sizes := []int{1, 2, 3, 10, 41, 100, 1000, 5000}
	for trial := range 600 {
		n := sizes[r.IntN(len(sizes))]
		if trial == 0 {
			n = 151936
		}
		o := Options{
			Temperature:      []float32{0, 0.3, 0.8, 1, 1.7}[r.IntN(5)],
			TopK:             []int{-1, 0, 1, 2, 5, 40, n - 1, n, n + 3}[r.IntN(9)],
			TopP:             []float32{0.5, 0.9, 0.99, 1}[r.IntN(4)],
			MinP:             []float32{0, 0, 0.05, 0.3}[r.IntN(4)],
			RepeatPenalty:    []float32{1, 1, 1.1, 2, 0.7}[r.IntN(5)],
			RepeatLastN:      []int{0, 1, 3, 64, -1}[r.IntN(5)],
			PresencePenalty:  []float32{0, 0, 0.5, -0.3}[r.IntN(4)],
			FrequencyPenalty: []float32{0, 0, 0.25}[r.IntN(3)],
			Seed:             int64(r.IntN(1000)),
		}
		s, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := New(o)
		for range r.IntN(80) { // a prompt, some of it outside the vocabulary
			id := int32(r.IntN(min(n, 50)+2)) - 1
			s.Accept(id)
			ref.Accept(id)
		}
		logits := make([]float32, n)
		for step := range 12 {
			ties := r.IntN(3) == 0 // values on a coarse grid: ties at every rank
			for i := range logits {
				v := r.NormFloat64() * 3
				if ties {
					v = math.Round(v)
				}
				logits[i] = float32(v)
			}
			for range r.IntN(4) { // a few masked, the odd NaN
				logits[r.IntN(n)] = float32(math.Inf(-1))
			}
			if r.IntN(40) == 0 {
				logits[r.IntN(n)] = float32(math.NaN())
			}
			before := slices.Clone(logits)
			got, gotErr := s.Sample(logits)
			want, wantErr := referenceSample(ref, logits)
			if got != want || (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("trial %d step %d, n=%d, %+v: Sample gives %d (%v), the reference %d (%v)", trial, step, n, o, got, gotErr, want, wantErr)
			}
			if !slices.Equal(before, logits) && !slices.ContainsFunc(before, func(v float32) bool { return v != v }) {
				t.Fatalf("trial %d: Sample changed its logits", trial)
			}
			if gotErr != nil {
				break
			}
			s.Accept(got)
			ref.Accept(got)
		}
	}
}
