package residency

import (
	"strings"

	"github.com/mlxg/mlxg/registry/safetensors"
)

// ExpertBytes is the file bytes of the checkpoint in dir that a backend streams: the
// stacked expert matrices ([experts, out, in] packed codes, U32) with their scales and
// biases. A model without them (dense, or float experts) has none.
func ExpertBytes(dir string) (int64, error) {
	hs, err := safetensors.ReadDirHeaders(dir)
	if err != nil {
		return 0, err
	}
	stacked := map[string]bool{}
	for _, h := range hs {
		for _, t := range h.Tensors {
			if p, ok := strings.CutSuffix(t.Name, ".weight"); ok && len(t.Shape) == 3 && t.Shape[0] > 1 && t.DType == safetensors.U32 && !PerHeadStack(p) {
				stacked[p] = true
			}
		}
	}
	var n int64
	for _, h := range hs {
		for _, t := range h.Tensors {
			i := strings.LastIndexByte(t.Name, '.')
			if i > 0 && stacked[t.Name[:i]] {
				n += t.End - t.Begin
			}
		}
	}
	return n, nil
}

// PerHeadStack reports whether the stacked matrices under prefix are one per attention
// head rather than one per expert: multi-head latent attention's kv_b_proj halves as
// mlx-lm stores them (self_attn.embed_q, self_attn.unembed_out), read whole by every
// token and so never streamed.
func PerHeadStack(prefix string) bool {
	return strings.HasSuffix(prefix, ".embed_q") || strings.HasSuffix(prefix, ".unembed_out")
}

// Budget is the weight budget of a model of pinned non-expert bytes and experts bytes of
// experts when spare bytes of memory are left for an expert cache after the pinned weights,
// the KV cache, a pass's activations and the reserve: the pinned bytes and the spare, at
// most every expert. It is 0 when nothing is left for an expert cache.
func Budget(pinned, experts, spare int64) int64 {
	if spare <= 0 {
		return 0
	}
	return pinned + min(experts, spare)
}
