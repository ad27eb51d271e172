package runner

import (
	"context"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// logSoftmax is the reference: log(exp(x_i) / Σ exp(x_j)) in float64, the long way.
func logSoftmax(logits []float32) []float64 {
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

// TestLogprobsMatchEngineLogits: the log-probabilities a generation reports are the
// log-softmax of the CPU engine's raw logits at each step (recomputed here with the same
// forward passes), before the repeat penalty and the temperature that chose the tokens;
// the top alternatives are the most likely tokens in order; the streamed entries are the
// result's, one per generated token.
func TestLogprobsMatchEngineLogits(t *testing.T) {
	e := loadChat(t, nil)
	o := DefaultOptions()
	o.Temperature, o.RepeatPenalty, o.Seed, o.NumPredict = 1.7, 1.5, 7, 10
	const prompt = "The sea is"
	var streamed []Logprob
	var pieces int
	res, err := e.Generate(context.Background(), Request{Prompt: prompt, Options: o, Logprobs: true, TopLogprobs: 5,
		OnLogprobs: func(lps []Logprob) { streamed = append(streamed, lps...) }},
		func(string) error { pieces++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tokens) != 10 || len(res.Logprobs) != 10 || !reflect.DeepEqual(streamed, res.Logprobs) || pieces == 0 {
		t.Fatalf("%d tokens, %d logprobs, %d streamed", len(res.Tokens), len(res.Logprobs), len(streamed))
	}

	caches, err := e.Model.NewCaches(false) // as the engine's default KV cache
	if err != nil {
		t.Fatal(err)
	}
	logits, err := e.Model.Forward(context.Background(), e.Tokenizer.Encode(prompt, true), caches, false)
	if err != nil {
		t.Fatal(err)
	}
	notTop := 0
	for k, id := range res.Tokens {
		want := logSoftmax(logits)
		lp := res.Logprobs[k]
		if lp.ID != id || math.Abs(lp.Logprob-want[id]) > 1e-6 {
			t.Fatalf("token %d (id %d): logprob %+v, want %v", k, id, lp, want[id])
		}
		order := make([]int, len(want))
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return want[order[a]] > want[order[b]] })
		if len(lp.Top) != 5 {
			t.Fatalf("token %d: %d top entries, want 5", k, len(lp.Top))
		}
		for i, top := range lp.Top {
			if int(top.ID) != order[i] || math.Abs(top.Logprob-want[order[i]]) > 1e-6 {
				t.Fatalf("token %d: top[%d] = %+v, want id %d logprob %v", k, i, top, order[i], want[order[i]])
			}
		}
		if int(id) != order[0] {
			notTop++
		}
		if logits, err = e.Model.Forward(context.Background(), []int32{id}, caches, false); err != nil {
			t.Fatal(err)
		}
	}
	// At temperature 1.7 with a repeat penalty on a random model, sampling leaves the
	// argmax: the reported values are the raw distribution's, not the sampler's.
	if notTop == 0 {
		t.Fatalf("every sampled token was the raw argmax: the test does not exercise sampling %v", res.Tokens)
	}

	// Without top_logprobs there are no alternatives; without logprobs, nothing.
	res, err = e.Generate(context.Background(), Request{Prompt: prompt, Options: o, Logprobs: true}, nil)
	if err != nil || len(res.Logprobs) != 10 || res.Logprobs[0].Top != nil {
		t.Fatalf("logprobs without top: %v %+v", err, res.Logprobs)
	}
	if res, err = e.Generate(context.Background(), Request{Prompt: prompt, Options: o}, nil); err != nil || res.Logprobs != nil {
		t.Fatalf("logprobs not asked for: %v %+v", err, res.Logprobs)
	}
	for _, bad := range []int{-1, 21} {
		if _, err := e.Generate(context.Background(), Request{Prompt: prompt, Options: o, Logprobs: true, TopLogprobs: bad}, nil); err == nil || !strings.Contains(err.Error(), "top_logprobs") {
			t.Fatalf("top_logprobs %d: %v", bad, err)
		}
	}
}

// TestLogprobsStopString: a token whose text ends in a stop string is not passed on, and
// neither are its log-probabilities; the reported entries are those of the leading tokens.
func TestLogprobsStopString(t *testing.T) {
	e := loadChat(t, nil)
	o := Greedy()
	o.NumPredict = 24
	full, err := e.Generate(context.Background(), Request{Messages: hello, Options: o, Logprobs: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	runes := []rune(full.Text)
	o.Stop = []string{string(runes[len(runes)/2 : len(runes)/2+3])}
	res, err := e.Generate(context.Background(), Request{Messages: hello, Options: o, Logprobs: true}, nil)
	if err != nil || res.DoneReason != "stop" {
		t.Fatal(err, res.DoneReason)
	}
	n := len(res.Logprobs)
	if n == 0 || n > len(res.Tokens) || !reflect.DeepEqual(res.Logprobs, full.Logprobs[:n]) {
		t.Fatalf("%d logprobs for %d tokens; they must be the leading entries of the full run's", n, len(res.Tokens))
	}
	var text strings.Builder
	for _, lp := range res.Logprobs[:n-1] {
		text.Write(e.Tokenizer.Piece(lp.ID))
	}
	if !strings.HasPrefix(res.Text, text.String()) {
		t.Fatalf("the tokens before the last reported one spell %q, beyond the text %q", text.String(), res.Text)
	}
}

// TestGenerateContext: a result's Context is the conversation as tokens; passing it back
// with a new prompt continues from it exactly as generating from those tokens does.
func TestGenerateContext(t *testing.T) {
	e := loadChat(t, nil)
	o := Greedy()
	o.NumPredict = 6
	first, err := e.Generate(context.Background(), Request{Prompt: "Once upon a time", Options: o, WantContext: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := append(e.Tokenizer.Encode("Once upon a time", true), e.Tokenizer.Encode(first.Text, false)...)
	if !slices.Equal(first.Context, want) {
		t.Fatalf("context %v, want the prompt's and the reply's tokens %v", first.Context, want)
	}
	next, err := e.Generate(context.Background(), Request{Prompt: " and then", Context: first.Context, Options: o, WantContext: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := append(slices.Clone(first.Context), e.Tokenizer.Encode(" and then", false)...)
	if next.PromptTokens != len(ids) || !slices.Equal(next.Context[:len(ids)], ids) {
		t.Fatalf("prompt of %d tokens, context %v; want %v", next.PromptTokens, next.Context, ids)
	}
	var direct []int32
	if _, err := e.GenerateTokens(context.Background(), ids, o, func(id int32) (bool, error) {
		direct = append(direct, id)
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(next.Tokens, direct) {
		t.Fatalf("continuing from the context gave %v, generating from its tokens %v", next.Tokens, direct)
	}
	if _, err := e.Generate(context.Background(), Request{Prompt: "x", Context: []int32{1, 999999999}, Options: o}, nil); err == nil || !strings.Contains(err.Error(), "context[1]") {
		t.Fatalf("a context id outside the vocabulary: %v", err)
	}
}
