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
	window  []int32 // the penalty window, sorted (scratch)
	pen     []token // the penalized logits, by id (scratch)
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
		opts: opts,
		rng:  rand.New(rand.NewPCG(seed, seed^0x9E3779B9)),
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
	// Only the few tokens of the penalty window differ from logits: greedy decoding and
	// top_k read logits in place with those substituted, instead of copying all of them
	// (1.2 MB a step at Qwen's vocabulary) into tokens first.
	pen := s.penalties(logits)
	if s.opts.Temperature == 0 {
		best := greedy(logits, pen)
		if math.IsNaN(float64(best.value)) {
			return -1, errors.New("sample: logits are NaN; the model produced no usable output")
		}
		return best.id, nil
	}

	ts := s.dist(logits, pen)
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

// dist is the sampling distribution over logits with pen's penalized values in place:
// the tokens top_k, top_p and min_p keep, with their probabilities (not renormalised
// after top_p and min_p), highest first.
func (s *Sampler) dist(logits []float32, pen []token) []token {
	var ts []token
	if k := s.opts.TopK; k > 0 && k < len(logits) {
		ts = s.topKLogits(logits, pen, k)
	} else {
		ts = s.tokens(logits, pen)
		ts = topK(ts, s.opts.TopK)
	}
	temperature(ts, s.opts.Temperature)
	softmax(ts)
	ts = topP(ts, s.opts.TopP)
	return minP(ts, s.opts.MinP)
}

// SampleDraft decides a drafted token at the position whose logits are given, so that the
// token returned is distributed as Sample's (speculative sampling with a draft that is a
// point mass on draft, as prompt lookup's is): greedy, it is the highest token, which
// accepts the draft when they are the same; sampling, the draft is accepted with its
// probability p(draft), and otherwise a token is drawn from the distribution with the
// draft removed and the rest renormalised. P(t) = p(d)·[t=d] + (1-p(d))·p(t)/(1-p(d))·[t≠d]
// = p(t). It does not record the token: call Accept with it.
func (s *Sampler) SampleDraft(logits []float32, draft int32) (id int32, accepted bool, err error) {
	if s.opts.Temperature == 0 {
		id, err = s.Sample(logits)
		return id, err == nil && id == draft, err
	}
	if len(logits) == 0 {
		return -1, false, errors.New("sample: no logits")
	}
	ts := s.dist(logits, s.penalties(logits))
	var sum, pd float32
	for _, t := range ts {
		sum += t.value
		if t.id == draft {
			pd = t.value
		}
	}
	if math.IsNaN(float64(sum)) || sum <= 0 {
		return -1, false, errors.New("sample: probabilities sum to NaN or 0; the model produced no usable output")
	}
	if pd > 0 && s.rng.Float32()*sum < pd {
		return draft, true, nil
	}
	rest := sum - pd
	if rest <= 0 {
		return draft, true, nil // only the draft has mass (rounding)
	}
	r := s.rng.Float32() * rest
	var acc float32
	last := int32(-1)
	for _, t := range ts {
		if t.id == draft {
			continue
		}
		acc += t.value
		last = t.id
		if r < acc {
			return t.id, false, nil
		}
	}
	return last, false, nil // rounding left r at the top of the mass
}

// TokenProb is a token and its probability.
type TokenProb struct {
	ID   int32
	Prob float64
}

// Distribution returns the distribution Sample draws from: the tokens the filters keep,
// with their probabilities renormalised, likeliest first (at temperature 0, the argmax
// with probability 1). A draft model's sampler gives it for SampleDraftFrom.
func (s *Sampler) Distribution(logits []float32) ([]TokenProb, error) {
	if len(logits) == 0 {
		return nil, errors.New("sample: no logits")
	}
	pen := s.penalties(logits)
	if s.opts.Temperature == 0 {
		best := greedy(logits, pen)
		if math.IsNaN(float64(best.value)) {
			return nil, errors.New("sample: logits are NaN; the model produced no usable output")
		}
		return []TokenProb{{best.id, 1}}, nil
	}
	ts := s.dist(logits, pen)
	var sum float64
	for _, t := range ts {
		sum += float64(t.value)
	}
	if math.IsNaN(sum) || sum <= 0 {
		return nil, errors.New("sample: probabilities sum to NaN or 0; the model produced no usable output")
	}
	out := make([]TokenProb, len(ts))
	for i, t := range ts {
		out[i] = TokenProb{t.id, float64(t.value) / sum}
	}
	return out, nil
}

// Draw returns a token drawn from q (a Distribution).
func (s *Sampler) Draw(q []TokenProb) int32 {
	var sum float64
	for _, t := range q {
		sum += t.Prob
	}
	r := float64(s.rng.Float32()) * sum
	var acc float64
	for _, t := range q {
		acc += t.Prob
		if r < acc {
			return t.ID
		}
	}
	return q[len(q)-1].ID
}

// SampleDraftFrom decides a token a draft model drafted from its distribution q (the draft
// sampler's Distribution, which the draft was drawn from), so that the token returned is
// distributed as Sample's p: the draft is kept with probability min(1, p(d)/q(d)), and
// otherwise a token is drawn from max(0, p−q) renormalised (speculative sampling). At
// temperature 0 it is SampleDraft's rule: the argmax, keeping a draft that is it. It does
// not record the token: call Accept with it.
func (s *Sampler) SampleDraftFrom(logits []float32, draft int32, q []TokenProb) (id int32, accepted bool, err error) {
	if s.opts.Temperature == 0 {
		return s.SampleDraft(logits, draft)
	}
	p, err := s.Distribution(logits)
	if err != nil {
		return -1, false, err
	}
	qOf := make(map[int32]float64, len(q))
	for _, t := range q {
		qOf[t.ID] += t.Prob
	}
	var pd float64
	for _, t := range p {
		if t.ID == draft {
			pd = t.Prob
		}
	}
	if qd := qOf[draft]; qd > 0 && float64(s.rng.Float32())*qd < pd {
		return draft, true, nil // u < p/q, with u·q < p so that p >= q always keeps it
	}
	var rest float64
	for _, t := range p {
		rest += max(0, t.Prob-qOf[t.ID])
	}
	if rest <= 0 {
		return draft, pd > 0, nil // p = q up to rounding: the draft is p's own draw
	}
	r := float64(s.rng.Float32()) * rest
	var acc float64
	last := int32(-1)
	for _, t := range p {
		w := max(0, t.Prob-qOf[t.ID])
		if w == 0 {
			continue
		}
		acc += w
		last = t.ID
		if r < acc {
			return t.ID, false, nil
		}
	}
	return last, false, nil
}

// tokens returns every token with its logit, penalized where pen says, in s.buf.
func (s *Sampler) tokens(logits []float32, pen []token) []token {
	if cap(s.buf) < len(logits) {
		s.buf = make([]token, len(logits))
	}
	ts := s.buf[:len(logits)]
	for i, v := range logits {
		ts[i] = token{int32(i), v}
	}
	for _, p := range pen {
		ts[p.id].value = p.value
	}
	return ts
}

// penalize applies the repeat, frequency and presence penalties to every token that
// occurs in the last RepeatLastN tokens of the history.
func (s *Sampler) penalize(ts []token) {
	s.eachRepeat(len(ts), func(id int32, count int) {
		o := s.opts
		ts[id].value = penalty(ts[id].value, count, o.RepeatPenalty, o.PresencePenalty, o.FrequencyPenalty)
	})
}

// penalties returns the penalized logit of every token in the penalty window, in
// increasing id order (in s.pen).
func (s *Sampler) penalties(logits []float32) []token {
	s.pen = s.pen[:0]
	s.eachRepeat(len(logits), func(id int32, count int) {
		o := s.opts
		s.pen = append(s.pen, token{id, penalty(logits[id], count, o.RepeatPenalty, o.PresencePenalty, o.FrequencyPenalty)})
	})
	return s.pen
}

// eachRepeat calls fn with each token id below n in the last RepeatLastN tokens of the
// history and how often it occurs there, in increasing id order; not at all when the
// penalties are off.
func (s *Sampler) eachRepeat(n int, fn func(id int32, count int)) {
	o := s.opts
	last := o.RepeatLastN
	if last == 0 || len(s.history) == 0 || (o.RepeatPenalty == 1 && o.PresencePenalty == 0 && o.FrequencyPenalty == 0) {
		return
	}
	window := s.history
	if last > 0 && len(window) > last {
		window = window[len(window)-last:]
	}
	w := append(s.window[:0], window...)
	slices.Sort(w)
	s.window = w
	for i := 0; i < len(w); {
		j := i + 1
		for j < len(w) && w[j] == w[i] {
			j++
		}
		if id := w[i]; id >= 0 && int(id) < n {
			fn(id, j-i)
		}
		i = j
	}
}

// greedy returns the highest token (the first on ties) of logits with pen's values in
// place of theirs.
func greedy(logits []float32, pen []token) token {
	best := token{0, logits[0]}
	if len(pen) > 0 && pen[0].id == 0 {
		best.value, pen = pen[0].value, pen[1:]
	}
	from := 1
	for _, p := range pen {
		best = maxFrom(best, logits[from:p.id], from)
		if p.value > best.value {
			best = p
		}
		from = int(p.id) + 1
	}
	return maxFrom(best, logits[from:], from)
}

// maxFrom is the first token of vals (ids from on) above best, or best.
func maxFrom(best token, vals []float32, from int) token {
	for i, v := range vals {
		if v > best.value {
			best = token{int32(from + i), v}
		}
	}
	return best
}

// topKLogits is topK over every token of logits with pen's values in place of theirs,
// computed as topK computes it (the same heap, fed in the same order, so that ties end
// the same way) without making a token for each.
func (s *Sampler) topKLogits(logits []float32, pen []token, k int) []token {
	if cap(s.buf) < k {
		s.buf = make([]token, k)
	}
	h := s.buf[:k]
	for i := range h {
		h[i] = token{int32(i), logits[i]}
	}
	for len(pen) > 0 && int(pen[0].id) < k {
		h[pen[0].id].value = pen[0].value
		pen = pen[1:]
	}
	for i := k/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
	from := k
	for _, p := range pen {
		offer(h, logits[from:p.id], from)
		if p.value > h[0].value {
			h[0] = p
			siftDown(h, 0)
		}
		from = int(p.id) + 1
	}
	offer(h, logits[from:], from)
	slices.SortFunc(h, byValue)
	return h
}

// offer puts each of vals (ids from on) that beats the heap's least into its place.
func offer(h []token, vals []float32, from int) {
	least := h[0].value
	for i, v := range vals {
		if v > least {
			h[0] = token{int32(from + i), v}
			siftDown(h, 0)
			least = h[0].value
		}
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

// byValue orders tokens highest first, then by id.
func byValue(a, b token) int {
	switch {
	case a.value > b.value:
		return -1
	case a.value < b.value:
		return 1
	}
	return int(a.id - b.id)
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
