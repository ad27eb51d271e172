package server

// Log-probabilities of generated tokens: Ollama's logprobs/top_logprobs on /api/generate and
// /api/chat, and OpenAI's shapes for /v1/chat/completions and /v1/completions.

import (
	"math"
	"net/http"
	"unicode/utf8"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/openai"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/sample"
	"github.com/mlxg/mlxg/text/tokenizer"
)

// minLogprob stands for a token of probability 0 (a logit of -Inf), which JSON cannot
// carry; OpenAI reports such tokens as -9999.
const minLogprob = -9999

// checkTopLogprobs validates top_logprobs (Ollama and OpenAI: 0 to 20).
func checkTopLogprobs(n int) error {
	if n < 0 || n > sample.MaxTopLogprobs {
		return errorf(http.StatusBadRequest, "top_logprobs is %d: it must be between 0 and %d", n, sample.MaxTopLogprobs)
	}
	return nil
}

// toLogprobs names the runner's token ids with the tokenizer's pieces.
func toLogprobs(tok *tokenizer.Tokenizer, in []runner.Logprob) []api.Logprob {
	one := func(t sample.TokenLogprob) api.TokenLogprob {
		b := tok.Piece(t.ID)
		bs := make([]int, len(b))
		for i, c := range b {
			bs[i] = int(c)
		}
		lp := t.Logprob
		if math.IsInf(lp, -1) || lp < minLogprob {
			lp = minLogprob
		}
		text := string(b)
		if !utf8.Valid(b) {
			text = string([]rune(text)) // invalid bytes as U+FFFD, as JSON would show them
		}
		return api.TokenLogprob{Token: text, Logprob: lp, Bytes: bs}
	}
	out := make([]api.Logprob, len(in))
	for i, l := range in {
		out[i].TokenLogprob = one(l.TokenLogprob)
		for _, t := range l.Top {
			out[i].TopLogprobs = append(out[i].TopLogprobs, one(t))
		}
	}
	return out
}

// oaiChatLogprobs is a chat choice's logprobs: every entry has top_logprobs (empty when
// none were asked for) and bytes, as OpenAI sends them.
func oaiChatLogprobs(lps []api.Logprob) *openai.ChoiceLogprobs {
	out := &openai.ChoiceLogprobs{Content: make([]openai.TokenLogprob, len(lps))}
	for i, l := range lps {
		e := openai.TokenLogprob{Token: l.Token, Logprob: l.Logprob, Bytes: l.Bytes, TopLogprobs: []openai.TopLogprob{}}
		for _, t := range l.TopLogprobs {
			e.TopLogprobs = append(e.TopLogprobs, openai.TopLogprob{Token: t.Token, Logprob: t.Logprob, Bytes: t.Bytes})
		}
		out.Content[i] = e
	}
	return out
}

// oaiCompletionLogprobs is a /v1/completions choice's logprobs in OpenAI's legacy shape
// (tokens, token_logprobs, top_logprobs as token → logprob, text_offset: where each token
// starts in the choice's text, in characters, from offset), with Ollama's content list too.
func oaiCompletionLogprobs(lps []api.Logprob, offset int) *openai.CompletionLogprobs {
	out := &openai.CompletionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{},
		TextOffset: []int{}, Content: oaiChatLogprobs(lps).Content}
	for _, l := range lps {
		out.Tokens = append(out.Tokens, l.Token)
		out.TokenLogprobs = append(out.TokenLogprobs, l.Logprob)
		top := map[string]float64{}
		for _, t := range l.TopLogprobs {
			if _, dup := top[t.Token]; !dup { // two tokens that read the same: the likelier one
				top[t.Token] = t.Logprob
			}
		}
		out.TopLogprobs = append(out.TopLogprobs, top)
		out.TextOffset = append(out.TextOffset, offset)
		offset += utf8.RuneCountInString(l.Token)
	}
	return out
}

// oaiChatLogprobRequest reads /v1/chat/completions' logprobs and top_logprobs (0 to 20, only
// with logprobs true, as OpenAI requires).
func oaiChatLogprobRequest(logprobs *bool, top *int) (bool, int, error) {
	on := logprobs != nil && *logprobs
	n := 0
	if top != nil {
		n = *top
		if err := checkTopLogprobs(n); err != nil {
			return false, 0, err
		}
		if n > 0 && !on {
			return false, 0, errorf(http.StatusBadRequest, "top_logprobs is %d but logprobs is not true: set \"logprobs\": true to get log-probabilities", n)
		}
	}
	return on, n, nil
}

// oaiCompletionLogprobRequest reads /v1/completions' logprobs: null for none, else how many of
// the most likely tokens to list per position (0 to 20; OpenAI itself allows up to 5).
func oaiCompletionLogprobRequest(logprobs *int) (bool, int, error) {
	if logprobs == nil {
		return false, 0, nil
	}
	if n := *logprobs; n < 0 || n > sample.MaxTopLogprobs {
		return false, 0, errorf(http.StatusBadRequest, "logprobs is %d: it must be between 0 and %d (how many of the most likely tokens to list per position), or null", n, sample.MaxTopLogprobs)
	}
	return true, *logprobs, nil
}
