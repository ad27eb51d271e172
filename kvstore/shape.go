package kvstore

import (
	"encoding/json"
	"fmt"
)

// stateBytesPerElement is the size of a recurrent layer's state elements: float32, as
// the CPU backend keeps them (and as a conservative bound for fp16/bf16 backends).
const stateBytesPerElement = 4

// configFields are the cache-relevant keys of a Hugging Face config.json.
type configFields struct {
	ModelType             string   `json:"model_type"`
	NumLayers             int      `json:"num_hidden_layers"`
	NumHeads              int      `json:"num_attention_heads"`
	NumKVHeads            *int     `json:"num_key_value_heads"`
	HiddenSize            int      `json:"hidden_size"`
	HeadDim               *int     `json:"head_dim"`
	MaxPositions          int      `json:"max_position_embeddings"`
	LayerTypes            []string `json:"layer_types"`
	SlidingWindow         *int     `json:"sliding_window"`
	SlidingWindowPattern  int      `json:"sliding_window_pattern"`
	UseSlidingWindow      *bool    `json:"use_sliding_window"`
	FullAttentionInterval int      `json:"full_attention_interval"`
	// Multi-head latent attention (DeepSeek V2/V3, GLM-4.7-Flash): the latent is cached.
	KVLoraRank     int `json:"kv_lora_rank"`
	QKNopeHeadDim  int `json:"qk_nope_head_dim"`
	QKRopeHeadDim  int `json:"qk_rope_head_dim"`
	VHeadDim       int `json:"v_head_dim"`
	LinearKHeads   int `json:"linear_num_key_heads"`
	LinearVHeads   int `json:"linear_num_value_heads"`
	LinearKHeadDim int `json:"linear_key_head_dim"`
	LinearVHeadDim int `json:"linear_value_head_dim"`
	LinearConvKern int `json:"linear_conv_kernel_dim"`
	// Gemma 4: full-attention layers of their own head size and KV heads, and the last
	// layers reading an earlier layer's KV.
	GlobalHeadDim     int  `json:"global_head_dim"`
	GlobalKVHeads     *int `json:"num_global_key_value_heads"`
	AttentionKEqV     bool `json:"attention_k_eq_v"`
	NumKVSharedLayers int  `json:"num_kv_shared_layers"`

	TextConfig json.RawMessage `json:"text_config"`
}

// allSliding are the model types whose sliding_window, when set, applies to every
// layer (runner/mistral, runner/phi3).
var allSliding = map[string]bool{"mistral": true, "mistral3": true, "ministral3": true, "phi3": true}

// ShapeFromConfig reads the per-layer cache shape from a config.json (a multimodal
// model's text_config when it has one). weightBytes is the checkpoint's tensor bytes.
//
// Supported layouts: every layer full attention; layer_types naming full_attention,
// sliding_attention and linear_attention layers; Gemma's sliding_window_pattern
// (every Nth layer full); Qwen3-Next's full_attention_interval (every Nth layer full,
// the others linear attention, Gated DeltaNet state); Mistral's all-sliding window;
// gpt-oss's alternation (even layers sliding) without layer_types; DeepSeek's and
// GLM-4.7-Flash's latent attention (kv_lora_rank: LayerLatent, the latent cached);
// Gemma 4's full-attention layers of global_head_dim (and num_global_key_value_heads
// with attention_k_eq_v) and its last num_kv_shared_layers layers, which read an
// earlier layer's KV and keep none (LayerNone).
func ShapeFromConfig(data []byte, weightBytes int64) (ModelShape, error) {
	var c configFields
	if err := json.Unmarshal(data, &c); err != nil {
		return ModelShape{}, fmt.Errorf("config.json: %w", err)
	}
	if c.NumLayers == 0 && len(c.TextConfig) > 0 {
		var t configFields
		if err := json.Unmarshal(c.TextConfig, &t); err != nil {
			return ModelShape{}, fmt.Errorf("config.json text_config: %w", err)
		}
		if t.ModelType == "" {
			t.ModelType = c.ModelType
		}
		c = t
	}
	if c.NumLayers <= 0 || c.NumHeads <= 0 {
		return ModelShape{}, fmt.Errorf("config.json: num_hidden_layers (%d) and num_attention_heads (%d) must be positive", c.NumLayers, c.NumHeads)
	}
	kvHeads := c.NumHeads
	if c.NumKVHeads != nil {
		kvHeads = *c.NumKVHeads
	}
	headDim := 0
	if c.HiddenSize > 0 {
		headDim = c.HiddenSize / c.NumHeads
	}
	if c.HeadDim != nil {
		headDim = *c.HeadDim
	}
	kDim, vDim := headDim, headDim
	latent := c.KVLoraRank > 0
	if latent {
		kvHeads, kDim, vDim = 1, c.QKRopeHeadDim, c.KVLoraRank
	}
	if kvHeads <= 0 || kDim <= 0 || vDim <= 0 {
		return ModelShape{}, fmt.Errorf("config.json: KV heads (%d) and head dims (%d, %d) must be positive: set num_key_value_heads and head_dim", kvHeads, kDim, vDim)
	}
	window := 0
	if c.SlidingWindow != nil {
		window = *c.SlidingWindow
	}
	types := c.LayerTypes
	if len(types) == 0 {
		types = make([]string, c.NumLayers)
		for i := range types {
			switch {
			case c.FullAttentionInterval > 0 && (i+1)%c.FullAttentionInterval != 0:
				types[i] = "linear_attention"
			case c.SlidingWindowPattern > 1 && window > 0 && (i+1)%c.SlidingWindowPattern != 0:
				types[i] = "sliding_attention"
			case allSliding[c.ModelType] && window > 0 && (c.MaxPositions <= 0 || window < c.MaxPositions):
				// Every layer slides; a window as long as the context is no window.
				types[i] = "sliding_attention"
			case gemma4(c.ModelType) && window > 0 && (i+1)%6 != 0 && i != c.NumLayers-1: // 5:1, the last layer full
				types[i] = "sliding_attention"
			case c.ModelType == "gpt_oss" && window > 0 && i%2 == 0: // sliding, full, sliding, ...
				types[i] = "sliding_attention"
			default:
				types[i] = "full_attention"
			}
		}
	}
	if len(types) != c.NumLayers {
		return ModelShape{}, fmt.Errorf("config.json: layer_types has %d entries for %d layers", len(types), c.NumLayers)
	}
	m := ModelShape{WeightBytes: weightBytes, MaxContext: c.MaxPositions, Layers: make([]LayerShape, c.NumLayers)}
	shared := 0 // Gemma 4's last layers, which read an earlier layer's KV
	if gemma4(c.ModelType) {
		shared = min(max(c.NumKVSharedLayers, 0), c.NumLayers)
	}
	for i, t := range types {
		ls := LayerShape{KVHeads: kvHeads, KHeadDim: kDim, VHeadDim: vDim}
		if i >= c.NumLayers-shared && (t == "full_attention" || t == "sliding_attention") {
			m.Layers[i] = LayerShape{Kind: LayerNone}
			continue
		}
		switch t {
		case "full_attention", "attention":
			ls.Kind = LayerFull
			if gemma4(c.ModelType) {
				if c.GlobalHeadDim > 0 {
					ls.KHeadDim, ls.VHeadDim = c.GlobalHeadDim, c.GlobalHeadDim
				}
				if c.AttentionKEqV && c.GlobalKVHeads != nil && *c.GlobalKVHeads > 0 {
					ls.KVHeads = *c.GlobalKVHeads
				}
			}
			if latent {
				ls.Kind = LayerLatent
			}
		case "sliding_attention":
			if window <= 0 {
				return ModelShape{}, fmt.Errorf("config.json: layer %d is sliding_attention but sliding_window is not set", i)
			}
			ls.Kind, ls.Window = LayerSliding, window
		case "linear_attention":
			if c.LinearVHeads <= 0 || c.LinearKHeadDim <= 0 || c.LinearVHeadDim <= 0 {
				return ModelShape{}, fmt.Errorf("config.json: layer %d is linear_attention but linear_num_value_heads, linear_key_head_dim and linear_value_head_dim are not all set", i)
			}
			kHeads := max(c.LinearKHeads, c.LinearVHeads)
			if c.LinearKHeads > 0 {
				kHeads = c.LinearKHeads
			}
			conv := int64(max(c.LinearConvKern-1, 0)) * int64(2*kHeads*c.LinearKHeadDim+c.LinearVHeads*c.LinearVHeadDim)
			state := int64(c.LinearVHeads) * int64(c.LinearKHeadDim) * int64(c.LinearVHeadDim)
			ls = LayerShape{Kind: LayerRecurrent, State: (conv + state) * stateBytesPerElement}
		default:
			return ModelShape{}, fmt.Errorf("config.json: layer %d has layer type %q; known: full_attention, sliding_attention, linear_attention", i, t)
		}
		m.Layers[i] = ls
	}
	return m, nil
}

// gemma4 reports Gemma 4's text model types.
func gemma4(modelType string) bool {
	return modelType == "gemma4" || modelType == "gemma4_text" || modelType == "gemma4_unified"
}
