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
	// streamBatch is the prompt chunk a pass computes at most (runner's num_batch default),
	// halved (to streamMinBatch at least) while its activations would take more than
	// 1/streamBatchShare of the memory left for them and the expert cache.
	streamBatch      = 512
	streamMinBatch   = 16
	streamBatchShare = 4
)

// streamFixed is the memory a streamed model takes beside its weights, its KV cache and
// its passes' activations: the runtime, and a row of logits with the sampler's copies.
func streamFixed(info *registry.ModelInfo) int64 {
	return streamRuntime + 4*4*int64(info.VocabSize)
}

// streamRowBytes is the memory of a pass per prompt row: the CPU backend keeps every
// tensor a pass makes until it ends, so each layer's norms, projections, attention output,
// router logits and residual sums add up (measured on the Qwen3-30B-A3B shape cut to 16
// layers: 2.0 MB a row, against 2.2 MB counted here), and a dense layer's MLP adds its
// gate, up and activation. A mixture of experts' own buffers are reused from one expert to
// the next.
func streamRowBytes(info *registry.ModelInfo) int64 {
	h := int64(info.EmbeddingLength)
	q := int64(info.Heads * info.HeadDim)
	kv := int64(info.KVHeads * info.HeadDim)
	layers := int64(max(info.Layers, 1))
	experts := int64(intConfig(info.Config, "num_experts"))
	perLayer := 8*h + 4*q + 4*kv + experts
	var moe int64
	if experts > 0 {
		k := int64(max(intConfig(info.Config, "num_experts_per_tok"), 1))
		moe = 3 * k * int64(intConfig(info.Config, "moe_intermediate_size"))
	} else {
		perLayer += 3 * int64(intConfig(info.Config, "intermediate_size"))
	}
	return 4 * (layers*perLayer + moe)
}

// streamBatchFor is the prompt chunk of a streamed load with spare bytes for its
// activations and its expert cache, of rows bytes a row.
func streamBatchFor(rows, spare int64) int {
	b := streamBatch
	for b > streamMinBatch && int64(b)*rows > spare/streamBatchShare {
		b /= 2
	}
	return b
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
