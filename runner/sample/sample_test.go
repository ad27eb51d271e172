package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// softmaxRef is a plain float64 softmax of logits/temp.
func softmaxRef(logits []float32, temp float64) []float64 {
	m := math.Inf(-1)
	for _, l := range logits {
		m = math.Max(m, float64(l))
	}
	p := make([]float64, len(logits))
	var sum float64
	for i, l := range logits {
		p[i] = math.Exp((float64(l) - m) / temp)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// draw samples n tokens with a fixed seed and returns their frequencies.
func draw(t *testing.T, o Options, logits []float32, n int) []float64 {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	freq := make([]float64, len(logits))
	for range n {
		id, err := s.Sample(logits)
		if err != nil {
			t.Fatal(err)
		}
		freq[id]++
	}
	for i := range freq {
		freq[i] /= float64(n)
	}
	return freq
}

// chiSquare compares empirical frequencies with want: it returns the statistic, the
// limit it must stay under, and false when a token of probability 0 was drawn.
func chiSquare(got, want []float64, n int) (stat, limit float64, ok bool) {
	df := -1
	for i := range want {
		if want[i] == 0 {
			if got[i] != 0 {
				return 0, 0, false
			}
			continue
		}
		df++
		d := (got[i] - want[i]) * float64(n)
		stat += d * d / (want[i] * float64(n))
	}
	// Mean df, sd sqrt(2df): 6 sd is never reached by chance, yet a wrong
	// distribution over 200k draws exceeds it by orders of magnitude.
	return stat, float64(df) + 6*math.Sqrt(2*float64(df)) + 10, true
}

func checkDist(t *testing.T, got, want []float64, n int) {
	t.Helper()
	stat, limit, ok := chiSquare(got, want, n)
	if !ok {
		t.Fatalf("a token of probability 0 was drawn\n got %v\nwant %v", got, want)
	}
	if stat > limit {
		t.Fatalf("chi-square %.1f > %.1f\n got %v\nwant %v", stat, limit, got, want)
	}
}

func randomLogits(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(r.NormFloat64() * 2)
	}
	return l
}

func plain(temp float32) Options {
	return Options{Temperature: temp, TopP: 1, RepeatPenalty: 1, Seed: 1}
}

const draws = 200_000

func TestTemperatureMatchesSoftmax(t *testing.T) {
	logits := randomLogits(1, 12)
	for _, temp := range []float32{1, 0.5, 1.7} {
		got := draw(t, plain(temp), logits, draws)
		checkDist(t, got, softmaxRef(logits, float64(temp)), draws)
	}
}

// The check can fail: a distribution at temperature 1 is not one at 0.8.
func TestChiSquareRejectsWrongTemperature(t *testing.T) {
	logits := randomLogits(2, 12)
	got := draw(t, plain(1), logits, draws)
	if stat, limit, _ := chiSquare(got, softmaxRef(logits, 0.8), draws); stat <= limit {
		t.Fatalf("temperature 1 passed as 0.8: chi-square %.1f <= %.1f", stat, limit)
	}
}

func TestTopK(t *testing.T) {
	logits := randomLogits(3, 20)
	k := 5
	o := plain(1)
	o.TopK = k
	got := draw(t, o, logits, draws)

	// Reference: softmax over the k largest logits only.
	idx := make([]int, len(logits))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		if logits[a] > logits[b] {
			return -1
		}
		return 1
	})
	masked := make([]float32, len(logits))
	for i := range masked {
		masked[i] = float32(math.Inf(-1))
	}
	for _, i := range idx[:k] {
		masked[i] = logits[i]
	}
	checkDist(t, got, softmaxRef(masked, 1), draws)
}

func TestTopPAndMinP(t *testing.T) {
	logits := []float32{3, 2.5, 2, 1, 0.5, 0, -1, -2}
	p := softmaxRef(logits, 1)

	// top_p 0.8: the shortest prefix of the sorted probabilities with mass > 0.8.
	o := plain(1)
	o.TopP = 0.8
	var cum float64
	want := make([]float64, len(p))
	for i := range p {
		want[i] = p[i]
		cum += p[i]
		if cum > 0.8 {
			break
		}
	}
	normalize(want)
	checkDist(t, draw(t, o, logits, draws), want, draws)

	// min_p 0.3: tokens with p >= 0.3 × p_max.
	o = plain(1)
	o.MinP = 0.3
	want = make([]float64, len(p))
	for i := range p {
		if p[i] >= 0.3*p[0] {
			want[i] = p[i]
		}
	}
	normalize(want)
	checkDist(t, draw(t, o, logits, draws), want, draws)
}

func normalize(p []float64) {
	var s float64
	for _, v := range p {
		s += v
	}
	for i := range p {
		p[i] /= s
	}
}

// Ollama's order: top_k before temperature, top_p and min_p after softmax.
func TestCombinedOrder(t *testing.T) {
	logits := randomLogits(4, 30)
	o := Options{Temperature: 0.7, TopK: 10, TopP: 0.9, MinP: 0.05, RepeatPenalty: 1, Seed: 9}

	// Reference pipeline in float64.
	type tk struct {
		id int
		v  float64
	}
	ts := make([]tk, len(logits))
	for i, l := range logits {
		ts[i] = tk{i, float64(l)}
	}
	slices.SortFunc(ts, func(a, b tk) int {
		if a.v > b.v {
			return -1
		}
		return 1
	})
	ts = ts[:10]
	var sum float64
	m := ts[0].v
	for i := range ts {
		ts[i].v = math.Exp((ts[i].v - m) / 0.7)
		sum += ts[i].v
	}
	for i := range ts {
		ts[i].v /= sum
	}
	var cum float64
	for i := range ts {
		cum += ts[i].v
		if cum > 0.9 {
			ts = ts[:i+1]
			break
		}
	}
	top := ts[0].v
	want := make([]float64, len(logits))
	for _, x := range ts {
		if x.v >= 0.05*top {
			want[x.id] = x.v
		}
	}
	normalize(want)
	checkDist(t, draw(t, o, logits, draws), want, draws)
}

func TestGreedy(t *testing.T) {
	logits := randomLogits(5, 1000)
	s, err := New(Options{Temperature: 0, RepeatPenalty: 1, Seed: -1})
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for i, l := range logits {
		if l > logits[want] {
			want = i
		}
	}
	for range 5 {
		if id, _ := s.Sample(logits); int(id) != want {
			t.Fatalf("greedy picked %d, argmax is %d", id, want)
		}
	}
	// Ties go to the lowest id.
	if id, _ := s.Sample([]float32{1, 3, 3, 2}); id != 1 {
		t.Fatalf("tie went to %d, want 1", id)
	}
}

func TestSeedReproducible(t *testing.T) {
	logits := randomLogits(6, 500)
	run := func(seed int64) []int32 {
		o := Defaults()
		o.Seed = seed
		s, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		var out []int32
		for range 200 {
			id, err := s.Sample(logits)
			if err != nil {
				t.Fatal(err)
			}
			s.Accept(id)
			out = append(out, id)
		}
		return out
	}
	a, b, c := run(42), run(42), run(43)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed gave different tokens")
	}
	if slices.Equal(a, c) {
		t.Fatal("different seeds gave the same 200 tokens")
	}
}

func TestPenalties(t *testing.T) {
	logits := []float32{2, -2, 1, 0.5, 3}
	o := Options{Temperature: 0, RepeatPenalty: 2, RepeatLastN: 3, PresencePenalty: 0.25, FrequencyPenalty: 0.5}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	// Token 4 falls out of the 3-token window; 0 occurs twice, 1 once.
	s.Accept(4, 0, 1, 0)
	ts := make([]token, len(logits))
	for i, v := range logits {
		ts[i] = token{int32(i), v}
	}
	s.penalize(ts)
	want := []float32{
		2/2.0 - 2*0.5 - 0.25, // positive: divided
		-2*2.0 - 0.5 - 0.25,  // negative: multiplied
		1, 0.5, 3,            // not in the window
	}
	for i := range want {
		if math.Abs(float64(ts[i].value-want[i])) > 1e-6 {
			t.Fatalf("token %d: penalized logit %g, want %g", i, ts[i].value, want[i])
		}
	}
	// Greedy sees the penalized logits: 4 still wins; with 4 in the window it loses.
	if id, _ := s.Sample(logits); id != 4 {
		t.Fatalf("greedy after penalties picked %d, want 4", id)
	}
	s.Accept(4)
	if id, _ := s.Sample(logits); id != 3 && id != 2 {
		t.Fatalf("penalized token still wins: %d", id)
	}

	// repeat_last_n 0 disables penalties.
	o.RepeatLastN = 0
	s, _ = New(o)
	s.Accept(4, 4, 4)
	if id, _ := s.Sample(logits); id != 4 {
		t.Fatalf("repeat_last_n 0 still penalized: picked %d", id)
	}
}

// Penalties shift a sampled distribution as the formula says.
func TestPenaltyDistribution(t *testing.T) {
	logits := randomLogits(8, 10)
	o := Options{Temperature: 1, TopP: 1, RepeatPenalty: 1.3, RepeatLastN: 64, PresencePenalty: 0.2, FrequencyPenalty: 0.1, Seed: 3}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	hist := []int32{1, 1, 3, 7, 7, 7}
	s.Accept(hist...)
	counts := map[int]int{1: 2, 3: 1, 7: 3}
	pen := slices.Clone(logits)
	for id, c := range counts {
		pen[id] = penalty(pen[id], c, 1.3, 0.2, 0.1)
	}
	freq := make([]float64, len(logits))
	for range draws {
		id, err := s.Sample(logits)
		if err != nil {
			t.Fatal(err)
		}
		freq[id]++
	}
	for i := range freq {
		freq[i] /= draws
	}
	checkDist(t, freq, softmaxRef(pen, 1), draws)
}

func TestBadInput(t *testing.T) {
	if _, err := New(Options{Temperature: float32(math.NaN())}); err == nil {
		t.Fatal("NaN temperature accepted")
	}
	s, _ := New(plain(1))
	if _, err := s.Sample(nil); err == nil {
		t.Fatal("empty logits accepted")
	}
	nan := float32(math.NaN())
	if _, err := s.Sample([]float32{nan, nan}); err == nil {
		t.Fatal("NaN logits sampled without error")
	}
	g, _ := New(Options{})
	if _, err := g.Sample([]float32{nan, nan}); err == nil {
		t.Fatal("NaN logits sampled greedily without error")
	}
	// Clamping as Ollama does.
	c, _ := New(Options{Temperature: -1, TopP: 3, MinP: -1, RepeatPenalty: -2})
	if o := c.Options(); o.Temperature != 0 || o.TopP != 1 || o.MinP != 0 || o.RepeatPenalty != 1 {
		t.Fatalf("options not clamped: %+v", o)
	}
}

func BenchmarkSampleDefaults(b *testing.B) {
	logits := randomLogits(9, 151936)
	s, _ := New(Defaults())
	for b.Loop() {
		id, _ := s.Sample(logits)
		s.Accept(id)
	}
}
