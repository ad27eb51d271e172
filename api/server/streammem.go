package server

// The memory of a model in streaming mode: its weight budget is what the memory allows
// beside the pinned weights, the KV cache, a pass's activations and the reserve, not a
// share of it.

import (
	"github.com/mlxg/mlxg/registry"
)

const (
	// streamRuntime is the process beside the model: the Go runtime and its collector's
	// slack, the tokenizer, the chat template, the HTTP server.
	streamRuntime = 96 << 20
	// streamBatch is the prompt chunk a pass computes at most (runner's num_batch default).
	streamBatch = 512
)

// streamOverhead is the memory a pass takes beside the weights and the KV cache, measured
// on the CPU backend (docs/streaming.md, "Memory"): the prompt chunk's hidden states and
// their intermediate products (the CPU backend keeps freed buffers for reuse), a row of
// logits and the sampler's copies, and the runtime.
func streamOverhead(info *registry.ModelInfo) int64 {
	h, v := int64(info.EmbeddingLength), int64(info.VocabSize)
	q := int64(info.Heads * info.HeadDim)
	inter := int64(intConfig(info.Config, "moe_intermediate_size"))
	if inter == 0 {
		inter = int64(intConfig(info.Config, "intermediate_size"))
	}
	k := int64(max(intConfig(info.Config, "num_experts_per_tok"), 1))
	perRow := 4 * (8*h + 3*q + 3*k*inter)
	return streamRuntime + streamBatch*perRow + 4*4*v
}

// intConfig reads a number from config.json (or its text_config), 0 when absent.
func intConfig(c map[string]any, key string) int {
	if f, ok := c[key].(float64); ok {
		return int(f)
	}
	if t, ok := c["text_config"].(map[string]any); ok {
		if f, ok := t[key].(float64); ok {
			return int(f)
		}
	}
	return 0
}
