// Package sample picks the next token from a model's logits the way Ollama does.
//
// Supported: greedy decoding (temperature 0), temperature, top_k, top_p, min_p,
// repeat_penalty over the last repeat_last_n tokens, presence_penalty and
// frequency_penalty, and a seed (the same seed and logits give the same tokens).
//
// The order of operations is Ollama's (sample/samplers.go):
//
//  1. penalties on the raw logits of every token seen in the last repeat_last_n
//     tokens (prompt included, as llama.cpp counts them): a positive logit is divided
//     by repeat_penalty, a negative one multiplied, then frequency_penalty×count and
//     presence_penalty are subtracted;
//  2. temperature 0: the highest logit wins (the first one on ties);
//  3. otherwise top_k (keeping the k highest, sorted), temperature, softmax, top_p
//     (the smallest prefix whose mass exceeds p), min_p (probabilities below
//     min_p × the highest), and one uniform draw over what is left.
package sample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Options are the sampling settings, named after Ollama's options.
type Options struct {
	Temperature      float32 // 0 selects greedy decoding; negative is taken as 0
	TopK             int     // keep the k most likely tokens; 0 or less keeps all
	TopP             float32 // nucleus mass in (0, 1); 1 or more disables it
	MinP             float32 // drop tokens below MinP × the top probability; 0 disables it
	RepeatPenalty    float32 // 1 disables it; 0 or less is taken as 1
	RepeatLastN      int     // how many recent tokens the penalties look at; 0 disables them
	PresencePenalty  float32 // subtracted once from every token in the window
	FrequencyPenalty float32 // subtracted once per occurrence in the window
	Seed             int64   // -1 draws a random seed
}

// Defaults returns Ollama's default sampling options.
func Defaults() Options {
	return Options{
		Temperature:   0.8,
		TopK:          40,
		TopP:          0.9,
		MinP:          0,
		RepeatPenalty: 1.1,
		RepeatLastN:   64,
		Seed:          -1,
	}
}

// Validate reports options that are not numbers at all; everything else is clamped
// into range as Ollama clamps it.
func (o Options) Validate() error {
	for _, f := range []struct {
		name string
		v    float32
	}{
		{"temperature", o.Temperature}, {"top_p", o.TopP}, {"min_p", o.MinP},
		{"repeat_penalty", o.RepeatPenalty}, {"presence_penalty", o.PresencePenalty},
		{"frequency_penalty", o.FrequencyPenalty},
	} {
		if math.IsNaN(float64(f.v)) || math.IsInf(float64(f.v), 0) {
			return fmt.Errorf("sampling option %s is %v: give a finite number", f.name, f.v)
		}
	}
	return nil
}

type token struct {
	id    int32
	value float32
}

// Sampler holds the options, the random source and the token history that the
// penalties look at. It is not safe for concurrent use: one per sequence.
type Sampler struct {
	opts    Options
	rng     *rand.Rand
	history []int32
	buf     []token
	counts  map[int32]int
}

// New returns a sampler for opts. Out-of-range values are clamped as Ollama clamps
// them; NaN or infinite values are an error.
func New(opts Options) (*Sampler, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.Temperature = max(opts.Temperature, 0)
	opts.TopP = min(max(opts.TopP, 0), 1)
	opts.MinP = min(max(opts.MinP, 0), 1)
	if opts.RepeatPenalty <= 0 {
		opts.RepeatPenalty = 1
	}
	seed := uint64(opts.Seed)
	if opts.Seed < 0 {
		seed = rand.Uint64()
	}
	// Two PCG words from one seed, as Ollama derives them.
	return &Sampler{
		opts:   opts,
		rng:    rand.New(rand.NewPCG(seed, seed^0x9E3779B9)),
		counts: map[int32]int{},
	}, nil
}

// Options returns the options in effect after clamping.
func (s *Sampler) Options() Options { return s.opts }

// Accept records a token (prompt or generated) for the penalties.
func (s *Sampler) Accept(ids ...int32) {
	s.history = append(s.history, ids...)
	// Keep the slice bounded: only the last RepeatLastN tokens are ever read.
	if n := s.opts.RepeatLastN; n > 0 && len(s.history) > 4*n+1024 {
		s.history = append(s.history[:0], s.history[len(s.history)-n:]...)
	}
}

// Reset forgets the token history.
func (s *Sampler) Reset() { s.history = s.history[:0] }

// Sample returns the next token id for logits (one per vocabulary entry). It does
// not record the token: call Accept with it.
func (s *Sampler) Sample(logits []float32) (int32, error) {
	if len(logits) == 0 {
		return -1, errors.New("sample: no logits")
	}
	if cap(s.buf) < len(logits) {
		s.buf = make([]token, len(logits))
	}
	ts := s.buf[:len(logits)]
	for i, v := range logits {
		ts[i] = token{int32(i), v}
	}
	s.penalize(ts)

	if s.opts.Temperature == 0 {
		best := ts[0]
		for _, t := range ts[1:] {
			if t.value > best.value {
				best = t
			}
		}
		if math.IsNaN(float64(best.value)) {
			return -1, errors.New("sample: logits are NaN; the model produced no usable output")
		}
		return best.id, nil
	}

	ts = topK(ts, s.opts.TopK)
	temperature(ts, s.opts.Temperature)
	softmax(ts)
	ts = topP(ts, s.opts.TopP)
	ts = minP(ts, s.opts.MinP)

	var sum float32
	for i := range ts {
		sum += ts[i].value
		ts[i].value = sum
	}
	if math.IsNaN(float64(sum)) || sum <= 0 {
		return -1, errors.New("sample: probabilities sum to NaN or 0; the model produced no usable output")
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

// penalize applies the repeat, frequency and presence penalties to every token that
// occurs in the last RepeatLastN tokens of the history.
func (s *Sampler) penalize(ts []token) {
	o := s.opts
	n := o.RepeatLastN
	if n == 0 || len(s.history) == 0 || (o.RepeatPenalty == 1 && o.PresencePenalty == 0 && o.FrequencyPenalty == 0) {
		return
	}
	window := s.history
	if n > 0 && len(window) > n {
		window = window[len(window)-n:]
	}
	clear(s.counts)
	for _, id := range window {
		if id >= 0 && int(id) < len(ts) {
			s.counts[id]++
		}
	}
	for id, count := range s.counts {
		ts[id].value = penalty(ts[id].value, count, o.RepeatPenalty, o.PresencePenalty, o.FrequencyPenalty)
	}
}

func penalty(logit float32, count int, repeat, presence, frequency float32) float32 {
	if repeat != 1 {
		// Dividing a negative logit would raise it; multiplying keeps the order.
		if logit < 0 {
			logit *= repeat
		} else {
			logit /= repeat
		}
	}
	logit -= float32(count) * frequency
	logit -= presence
	return logit
}

// topK keeps the k highest tokens, sorted by value, highest first; k <= 0 keeps
// (and sorts) all of them.
func topK(ts []token, k int) []token {
	byValue := func(a, b token) int {
		switch {
		case a.value > b.value:
			return -1
		case a.value < b.value:
			return 1
		}
		return int(a.id - b.id)
	}
	if k <= 0 || k >= len(ts) {
		slices.SortFunc(ts, byValue)
		return ts
	}
	// A min-heap of the k best so far: O(n log k) instead of sorting everything.
	h := ts[:k]
	for i := k/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
	for i := k; i < len(ts); i++ {
		if ts[i].value > h[0].value {
			h[0] = ts[i]
			siftDown(h, 0)
		}
	}
	slices.SortFunc(h, byValue)
	return h
}

func siftDown(h []token, i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1].value < h[c].value {
			c++
		}
		if h[i].value <= h[c].value {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// temperature divides by t after subtracting the maximum, so exp cannot overflow.
func temperature(ts []token, t float32) {
	t = max(t, 1e-7)
	m := ts[0].value
	for _, x := range ts[1:] {
		m = max(m, x.value)
	}
	for i := range ts {
		ts[i].value = (ts[i].value - m) / t
	}
}

func softmax(ts []token) {
	var sum float64
	for i := range ts {
		e := math.Exp(float64(ts[i].value))
		ts[i].value = float32(e)
		sum += e
	}
	for i := range ts {
		ts[i].value = float32(float64(ts[i].value) / sum)
	}
}

// topP keeps the shortest prefix (ts is sorted) whose mass exceeds p.
func topP(ts []token, p float32) []token {
	if p >= 1 {
		return ts
	}
	var sum float32
	for i, t := range ts {
		sum += t.value
		if sum > p {
			return ts[:i+1]
		}
	}
	return ts
}

// minP drops tokens whose probability is below p times the highest one.
func minP(ts []token, p float32) []token {
	if p <= 0 {
		return ts
	}
	var top float32
	for _, t := range ts {
		top = max(top, t.value)
	}
	threshold := top * p
	kept := ts[:0]
	for _, t := range ts {
		if t.value >= threshold {
			kept = append(kept, t)
		}
	}
	return kept
}
