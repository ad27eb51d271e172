package runner

import (
	"fmt"
	"math"

	"github.com/mlxg/mlxg/runner/sample"
)

// Options are a request's generation settings, named and defaulted as Ollama's
// options are (api/types.go), so the server can decode a request's "options" object
// straight into them.
type Options struct {
	NumCtx     int `json:"num_ctx"`     // context window in tokens (clamped to max_position_embeddings)
	NumBatch   int `json:"num_batch"`   // prompt tokens per prefill step
	NumKeep    int `json:"num_keep"`    // prompt tokens always kept when a prompt is truncated to fit num_ctx
	NumPredict int `json:"num_predict"` // most tokens to generate; -1 until EOS (shifting the context when full), -2 until the context is full

	Temperature      float32 `json:"temperature"`
	TopK             int     `json:"top_k"`
	TopP             float32 `json:"top_p"`
	MinP             float32 `json:"min_p"`
	RepeatPenalty    float32 `json:"repeat_penalty"`
	RepeatLastN      int     `json:"repeat_last_n"` // -1 means num_ctx, 0 disables the penalties
	PresencePenalty  float32 `json:"presence_penalty"`
	FrequencyPenalty float32 `json:"frequency_penalty"`
	Seed             int     `json:"seed"` // -1 picks a random seed

	Stop []string `json:"stop"` // generation ends before the first occurrence of any of these

	// NumDraft is the most tokens speculative decoding drafts a step (prompt lookup,
	// spec.go); 0 turns it off.
	NumDraft int `json:"num_draft"`
}

// DefaultOptions returns Ollama's defaults.
func DefaultOptions() Options {
	s := sample.Defaults()
	return Options{
		NumCtx:        4096,
		NumBatch:      512,
		NumKeep:       4,
		NumPredict:    -1,
		Temperature:   s.Temperature,
		TopK:          s.TopK,
		TopP:          s.TopP,
		MinP:          s.MinP,
		RepeatPenalty: s.RepeatPenalty,
		RepeatLastN:   s.RepeatLastN,
		Seed:          -1,
		NumDraft:      DefaultNumDraft,
	}
}

// Greedy returns DefaultOptions with sampling turned off: temperature 0 and no
// penalties, so the output is the model's argmax continuation.
func Greedy() Options {
	o := DefaultOptions()
	o.Temperature = 0
	o.RepeatPenalty = 1
	return o
}

// Validate reports options that cannot be used, naming the option.
func (o Options) Validate() error {
	switch {
	case o.NumCtx <= 0:
		return fmt.Errorf("num_ctx is %d: it must be positive (Ollama's default is 4096)", o.NumCtx)
	case o.NumBatch <= 0:
		return fmt.Errorf("num_batch is %d: it must be positive (default 512)", o.NumBatch)
	case o.NumKeep < 0:
		return fmt.Errorf("num_keep is %d: it cannot be negative", o.NumKeep)
	case o.NumPredict < -2:
		return fmt.Errorf("num_predict is %d: use a count, -1 (until EOS) or -2 (fill the context)", o.NumPredict)
	case o.NumDraft < 0 || o.NumDraft > MaxNumDraft:
		return fmt.Errorf("num_draft is %d: use 0 (no speculative decoding) to %d", o.NumDraft, MaxNumDraft)
	case o.RepeatLastN < -1:
		return fmt.Errorf("repeat_last_n is %d: use a count, 0 (off) or -1 (num_ctx)", o.RepeatLastN)
	}
	for _, s := range o.Stop {
		if s == "" {
			return fmt.Errorf("stop contains an empty string: remove it")
		}
	}
	for name, v := range map[string]float32{"temperature": o.Temperature, "top_p": o.TopP, "min_p": o.MinP,
		"repeat_penalty": o.RepeatPenalty, "presence_penalty": o.PresencePenalty, "frequency_penalty": o.FrequencyPenalty} {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%s is %v: give a finite number", name, v)
		}
	}
	return nil
}

// sampling converts the options for the sampler; numCtx resolves repeat_last_n -1.
func (o Options) sampling(numCtx int) sample.Options {
	last := o.RepeatLastN
	if last < 0 {
		last = numCtx
	}
	return sample.Options{
		Temperature: o.Temperature, TopK: o.TopK, TopP: o.TopP, MinP: o.MinP,
		RepeatPenalty: o.RepeatPenalty, RepeatLastN: last,
		PresencePenalty: o.PresencePenalty, FrequencyPenalty: o.FrequencyPenalty,
		Seed: int64(o.Seed),
	}
}
