// Package qwen2 is the Qwen2 / Qwen2.5 architecture (model_type "qwen2"), as
// transformers' Qwen2ForCausalLM computes it: Llama's decoder with biases on the q, k
// and v projections (bound from the checkpoint's *.bias tensors). Sliding-window
// attention (use_sliding_window) is not supported.
package qwen2

import (
	"fmt"

	"github.com/mlxg/mlxg/runner/llama"
	"github.com/mlxg/mlxg/runner/model"
)

func init() { model.Register("qwen2", New) }

// New binds a Qwen2 checkpoint.
func New(l *model.Loader) (model.Network, error) {
	if sw := string(l.Config.Raw["use_sliding_window"]); sw == "true" {
		return nil, fmt.Errorf("qwen2 with use_sliding_window is not supported yet")
	}
	rope, err := l.Config.RoPE()
	if err != nil {
		return nil, err
	}
	return llama.NewDecoder(l, func(p string) llama.Mixer {
		a := llama.NewAttention(l, p, rope)
		for _, proj := range []string{"q_proj", "k_proj", "v_proj"} {
			if !l.Has(p + proj + ".bias") {
				l.Fail(fmt.Errorf("qwen2 layer %s has no %s.bias", p, proj))
			}
		}
		return a
	}), nil
}
