// Package phi3 is Microsoft's Phi-3 architecture (model_type "phi3": Phi-4, Phi-4-mini,
// Phi-3 and Phi-3.5-mini), as transformers' Phi3ForCausalLM computes it: Llama's
// pre-norm decoder whose attention projections are fused into one qkv_proj (the query's
// rows, then the key's, then the value's) and whose MLP's gate and up projections are
// fused into gate_up_proj (the gate's rows first); partial rotary embeddings
// (partial_rotary_factor: the first part of each head rotated, Phi-4-mini 3/4);
// longrope (rope_scaling's short_factor and long_factor, switched at
// original_max_position_embeddings, with its attention factor on cos and sin); a
// sliding window on every layer when sliding_window is shorter than the context.
//
// The fused matrices are read as mlx-lm keeps them (fused, quantized like any linear
// layer); each part is bound as a weight of its own over its rows (model.Loader.LinearRows).
package phi3

import (
	"fmt"

	"github.com/mlxg/mlxg/runner/llama"
	"github.com/mlxg/mlxg/runner/mistral"
	"github.com/mlxg/mlxg/runner/model"
)

func init() { model.Register("phi3", New) }

// New binds a Phi-3 checkpoint.
func New(l *model.Loader) (model.Network, error) {
	cfg := l.Config
	windows, err := mistral.Windows(cfg)
	if err != nil {
		return nil, err
	}
	rope, err := cfg.RoPE()
	if err != nil {
		return nil, err
	}
	h, hd, inter := cfg.HiddenSize, cfg.HeadDim, cfg.IntermediateSize
	q, kv := cfg.NumHeads*hd, cfg.NumKVHeads*hd
	d := &llama.Decoder{Eps: cfg.RMSNormEps, KVHeads: cfg.NumKVHeads, HeadDim: hd, Windows: windows}
	d.Embed = l.Linear("model.embed_tokens", cfg.VocabSize, h)
	for i := 0; i < cfg.NumLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		qkv, gateUp := p+"self_attn.qkv_proj", p+"mlp.gate_up_proj"
		a := &llama.Attention{Heads: cfg.NumHeads, KVHeads: cfg.NumKVHeads, HeadDim: hd, RoPE: rope,
			Q: l.LinearRows(qkv, "q", 0, q, h),
			K: l.LinearRows(qkv, "k", q, kv, h),
			V: l.LinearRows(qkv, "v", q+kv, kv, h),
			O: l.Linear(p+"self_attn.o_proj", h, q),
		}
		d.Layers = append(d.Layers, llama.Layer{
			InputNorm: l.Vector(p+"input_layernorm.weight", h),
			Attn:      a,
			PostNorm:  l.Vector(p+"post_attention_layernorm.weight", h),
			MLP: &llama.MLP{
				Gate: l.LinearRows(gateUp, "gate", 0, inter, h),
				Up:   l.LinearRows(gateUp, "up", inter, inter, h),
				Down: l.Linear(p+"mlp.down_proj", h, inter),
			},
		})
	}
	d.Norm = l.Vector("model.norm.weight", h)
	d.Head = l.Head(d.Embed, cfg.VocabSize, h)
	return d.Network(), nil
}
