package randmodel

import (
	"fmt"
	"math"
)

// Gemma 4 in Hugging Face's layout (transformers' Gemma4ForCausalLM, or the language
// model of Gemma4ForConditionalGeneration without its towers).

// TinyGemma4 returns a small float32 Gemma 4 of the E2B kind: 6 layers (two sliding to
// a full one), full layers of their own head size with proportional RoPE over a quarter
// of it, per-layer embeddings, the last 2 layers reading the KV of layers 3 and 2 with a
// double-wide MLP, a sliding window of 8 positions, final soft-capping.
func TinyGemma4(vocab int) Config {
	c := Tiny("gemma4_text", vocab)
	c.NumLayers, c.NumKVHeads, c.HeadDim, c.GlobalHeadDim, c.RopeTheta = 6, 2, 32, 64, 1e6
	c.SlidingWindow, c.SlidingWindowPattern, c.RopeLocalBaseFreq, c.PartialRotary = 8, 3, 1e4, 0.25
	c.KVSharedLayers, c.PerLayerInput, c.DoubleWideMLP, c.FinalLogitSoftcapping = 2, 16, true, 30
	c.TieWordEmbeddings = true
	return c
}

// TinyGemma4MoE returns a small float32 Gemma 4 of the 26B-A4B kind in the multimodal
// layout (model_type gemma4, text_config nested): 4 layers alternating a sliding window
// of 8 positions and full attention, full layers with attention_k_eq_v over one KV head
// of their own head size, 8 experts of which 2 are picked per token beside the MLP.
func TinyGemma4MoE(vocab int) Config {
	c := TinyGemma4(vocab)
	c.Arch, c.NumLayers, c.SlidingWindowPattern, c.KVSharedLayers, c.PerLayerInput, c.DoubleWideMLP = "gemma4", 4, 2, 0, 0, false
	c.AttentionKEqV, c.GlobalKVHeads = true, 1
	c.NumExperts, c.TopK, c.MoEIntermediate, c.IntermediateSize = 8, 2, 32, 64
	return c
}

// TinyGemma4Unified is TinyGemma4MoE under model_type gemma4_unified.
func TinyGemma4Unified(vocab int) Config {
	c := TinyGemma4MoE(vocab)
	c.Arch = "gemma4_unified"
	return c
}

func (c Config) gemma4Types() []string {
	types := make([]string, c.NumLayers)
	for i := range types {
		types[i] = "full_attention"
		if c.sliding(i) {
			types[i] = "sliding_attention"
		}
	}
	return types
}

// gemma4Config is config.json: the text config, nested for the multimodal types.
func (c Config) gemma4Config() map[string]any {
	t := map[string]any{
		"model_type":                  "gemma4_text",
		"architectures":               []string{"Gemma4ForCausalLM"},
		"vocab_size":                  c.VocabSize,
		"vocab_size_per_layer_input":  c.VocabSize,
		"hidden_size":                 c.HiddenSize,
		"intermediate_size":           c.IntermediateSize,
		"num_hidden_layers":           c.NumLayers,
		"num_attention_heads":         c.NumHeads,
		"num_key_value_heads":         c.NumKVHeads,
		"head_dim":                    c.headDim(),
		"global_head_dim":             c.GlobalHeadDim,
		"hidden_activation":           "gelu_pytorch_tanh",
		"max_position_embeddings":     c.MaxPositions,
		"rms_norm_eps":                c.RMSNormEps,
		"tie_word_embeddings":         c.TieWordEmbeddings,
		"attention_bias":              false,
		"attention_dropout":           0.0,
		"initializer_range":           0.02,
		"use_cache":                   true,
		"sliding_window":              c.SlidingWindow,
		"layer_types":                 c.gemma4Types(),
		"final_logit_softcapping":     nil,
		"hidden_size_per_layer_input": c.PerLayerInput,
		"attention_k_eq_v":            c.AttentionKEqV,
		"num_kv_shared_layers":        c.KVSharedLayers,
		"use_double_wide_mlp":         c.DoubleWideMLP,
		"enable_moe_block":            c.NumExperts > 0,
		"rope_parameters": map[string]any{
			"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": c.RopeLocalBaseFreq},
			"full_attention":    map[string]any{"rope_type": "proportional", "partial_rotary_factor": c.PartialRotary, "rope_theta": c.RopeTheta},
		},
	}
	if c.FinalLogitSoftcapping > 0 {
		t["final_logit_softcapping"] = c.FinalLogitSoftcapping
	}
	if c.GlobalKVHeads > 0 {
		t["num_global_key_value_heads"] = c.GlobalKVHeads
	}
	if c.NumExperts > 0 {
		t["num_experts"], t["top_k_experts"], t["moe_intermediate_size"] = c.NumExperts, c.TopK, c.MoEIntermediate
	}
	if c.BOSTokenID != nil {
		t["bos_token_id"] = *c.BOSTokenID
	}
	if len(c.EOSTokenIDs) > 0 {
		t["eos_token_id"] = c.EOSTokenIDs[0]
	}
	if c.Arch == "gemma4_text" {
		t["torch_dtype"] = c.DType
		return t
	}
	m := map[string]any{
		"model_type":          c.Arch,
		"architectures":       []string{archNames[c.Arch]},
		"text_config":         t,
		"tie_word_embeddings": c.TieWordEmbeddings,
		"torch_dtype":         c.DType,
	}
	if len(c.EOSTokenIDs) > 0 {
		m["eos_token_id"] = c.EOSTokenIDs[0]
	}
	return m
}

// gemma4Tensors lists the weights as transformers saves them: the experts fused
// (experts.gate_up_proj [experts, 2·inter, hidden], the gate first; experts.down_proj
// [experts, hidden, inter]); the KV-shared layers without k/v projections.
func (c Config) gemma4Tensors() []TensorSpec {
	h := c.HiddenSize
	lin := func(name string, out, in int) TensorSpec {
		return TensorSpec{name, []int{out, in}, 0, float32(math.Sqrt(3 / float64(in)))}
	}
	norm := func(name string, n int) TensorSpec { return TensorSpec{name, []int{n}, 1, 0.2} }
	base := "model."
	if c.Arch != "gemma4_text" {
		base = "model.language_model."
	}
	embed := float32(0.1)
	if c.EmbeddingScale > 0 {
		embed = float32(c.EmbeddingScale)
	}
	ts := []TensorSpec{{base + "embed_tokens.weight", []int{c.VocabSize, h}, 0, embed}}
	L, pl := c.NumLayers, c.PerLayerInput
	if pl > 0 {
		ts = append(ts, TensorSpec{base + "embed_tokens_per_layer.weight", []int{c.VocabSize, L * pl}, 0, 1},
			lin(base+"per_layer_model_projection.weight", L*pl, h), norm(base+"per_layer_projection_norm.weight", pl))
	}
	firstShared := L - c.KVSharedLayers
	for i := range L {
		p := fmt.Sprintf("%slayers.%d.", base, i)
		first := len(ts)
		hd, kvh := c.headDim(), c.NumKVHeads
		full := !c.sliding(i)
		if full && c.GlobalHeadDim > 0 {
			hd = c.GlobalHeadDim
		}
		if full && c.AttentionKEqV {
			kvh = c.GlobalKVHeads
		}
		ts = append(ts, norm(p+"input_layernorm.weight", h),
			lin(p+"self_attn.q_proj.weight", c.NumHeads*hd, h), norm(p+"self_attn.q_norm.weight", hd))
		if i < firstShared {
			ts = append(ts, lin(p+"self_attn.k_proj.weight", kvh*hd, h))
			if !(full && c.AttentionKEqV) {
				ts = append(ts, lin(p+"self_attn.v_proj.weight", kvh*hd, h))
			}
			ts = append(ts, norm(p+"self_attn.k_norm.weight", hd))
		}
		inter := c.IntermediateSize
		if c.DoubleWideMLP && i >= firstShared && c.KVSharedLayers > 0 {
			inter *= 2
		}
		ts = append(ts, lin(p+"self_attn.o_proj.weight", h, c.NumHeads*hd),
			norm(p+"post_attention_layernorm.weight", h), norm(p+"pre_feedforward_layernorm.weight", h),
			lin(p+"mlp.gate_proj.weight", inter, h), lin(p+"mlp.up_proj.weight", inter, h), lin(p+"mlp.down_proj.weight", h, inter),
			norm(p+"post_feedforward_layernorm.weight", h))
		if E, I := c.NumExperts, c.MoEIntermediate; E > 0 {
			ts = append(ts, lin(p+"router.proj.weight", E, h), norm(p+"router.scale", h), norm(p+"router.per_expert_scale", E),
				TensorSpec{p + "experts.gate_up_proj", []int{E, 2 * I, h}, 0, float32(math.Sqrt(3 / float64(h)))},
				TensorSpec{p + "experts.down_proj", []int{E, h, I}, 0, float32(math.Sqrt(3 / float64(I)))},
				norm(p+"post_feedforward_layernorm_1.weight", h), norm(p+"pre_feedforward_layernorm_2.weight", h),
				norm(p+"post_feedforward_layernorm_2.weight", h))
		}
		if pl > 0 {
			ts = append(ts, lin(p+"per_layer_input_gate.weight", pl, h), lin(p+"per_layer_projection.weight", h, pl),
				norm(p+"post_per_layer_input_norm.weight", h))
		}
		ts = append(ts, TensorSpec{p + "layer_scalar", []int{1}, 0.8, 0.2})
		if c.TailScale > 0 && i >= c.TailFrom {
			for j := first; j < len(ts); j++ {
				if n := ts[j].Name; n == p+"self_attn.o_proj.weight" || n == p+"mlp.down_proj.weight" || n == p+"experts.down_proj" {
					ts[j].scale *= float32(c.TailScale)
				}
			}
		}
	}
	ts = append(ts, norm(base+"norm.weight", h))
	if !c.TieWordEmbeddings {
		ts = append(ts, lin("lm_head.weight", c.VocabSize, h))
	}
	return ts
}
