// Package mistral is Mistral AI's dense decoders, as transformers computes them:
//   - "mistral" (Mistral 7B, Mistral NeMo, Codestral, Devstral Small 1.x): Llama's
//     decoder with a sliding window of sliding_window positions on every layer when the
//     config sets one (MistralForCausalLM);
//   - "mistral3" (Mistral Small 3.1/3.2, Magistral, Devstral Small 2, Ministral 3): the
//     text model of Mistral3ForConditionalGeneration, read from text_config, its weights
//     under language_model.model.* (mlx-lm's layout; transformers 5's
//     model.language_model.* is read too), the vision tower and the projector left unbound;
//   - "ministral3" (Ministral 3's text model, Ministral3ForCausalLM): the same decoder
//     with YaRN (rope_parameters) and Llama 4's attention temperature tuning, the queries
//     scaled after RoPE by 1 + llama_4_scaling_beta·ln(1 + floor(position /
//     original_max_position_embeddings)); a mistral3 checkpoint whose text_config sets
//     llama_4_scaling_beta gets it too.
//
// layer_types (full_attention, sliding_attention), when present, says which layers slide.
// A window at least max_position_embeddings long is no window: every position of the
// context is inside it.
package mistral

import (
	"encoding/json"
	"fmt"

	"github.com/mlxg/mlxg/runner/llama"
	"github.com/mlxg/mlxg/runner/model"
)

func init() {
	model.Register("mistral", New)
	model.Register("mistral3", New)
	model.Register("ministral3", New)
}

// Windows reads each layer's sliding window from cfg (0: full attention), nil when no
// layer slides.
func Windows(cfg *model.Config) ([]int, error) {
	var f struct {
		SlidingWindow *int     `json:"sliding_window"`
		LayerTypes    []string `json:"layer_types"`
	}
	if raw, ok := cfg.Raw["sliding_window"]; ok {
		if err := json.Unmarshal(raw, &f.SlidingWindow); err != nil {
			return nil, fmt.Errorf("config.json: sliding_window: want a number or null, got %s", raw)
		}
	}
	if raw, ok := cfg.Raw["layer_types"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &f.LayerTypes); err != nil {
			return nil, fmt.Errorf("config.json: layer_types: %w", err)
		}
	}
	window := 0
	if f.SlidingWindow != nil {
		window = *f.SlidingWindow
	}
	if window < 0 {
		return nil, fmt.Errorf("config.json: sliding_window must not be negative, got %d", window)
	}
	if len(f.LayerTypes) > 0 && len(f.LayerTypes) != cfg.NumLayers {
		return nil, fmt.Errorf("config.json: layer_types has %d entries for %d layers", len(f.LayerTypes), cfg.NumLayers)
	}
	if cfg.MaxPositions > 0 && window >= cfg.MaxPositions {
		window = 0
	}
	out := make([]int, cfg.NumLayers)
	any := false
	for i := range out {
		sliding := window > 0
		if len(f.LayerTypes) > 0 {
			switch f.LayerTypes[i] {
			case "sliding_attention":
				if f.SlidingWindow == nil || *f.SlidingWindow <= 0 {
					return nil, fmt.Errorf("config.json: layer %d is sliding_attention but sliding_window is not set", i)
				}
			case "full_attention":
				sliding = false
			default:
				return nil, fmt.Errorf("config.json: layer %d has layer type %q (full_attention or sliding_attention)", i, f.LayerTypes[i])
			}
		}
		if sliding {
			out[i], any = window, true
		}
	}
	if !any {
		return nil, nil
	}
	return out, nil
}

// New binds a mistral, mistral3 or ministral3 checkpoint.
func New(l *model.Loader) (model.Network, error) {
	cfg := l.Config
	for _, k := range []string{"n_routed_experts", "num_local_experts", "kv_lora_rank"} {
		if v, ok := cfg.Raw[k]; ok && string(v) != "null" && string(v) != "0" {
			// Mistral Small 4 and Mixtral wear the same wrappers with experts (and latent attention).
			return nil, fmt.Errorf("config.json sets %s (%s): this Mistral model has a mixture of experts or latent attention, which mlxg's %s architecture does not run", k, v, cfg.ModelType)
		}
	}
	windows, err := Windows(cfg)
	if err != nil {
		return nil, err
	}
	rope, err := cfg.RoPE()
	if err != nil {
		return nil, err
	}
	qrope, err := cfg.QueryRoPE(rope)
	if err != nil {
		return nil, err
	}
	base, head := "model.", "lm_head"
	switch {
	case l.Has("language_model.model.embed_tokens.weight"): // mlx-lm and transformers 4
		base, head = "language_model.model.", "language_model.lm_head"
	case l.Has("model.language_model.embed_tokens.weight"): // transformers 5
		base = "model.language_model."
	}
	d := llama.NewDecoderAt(l, base, head, func(p string) llama.Mixer {
		a := llama.NewAttention(l, p, rope)
		if qrope != rope {
			a.QRoPE = qrope
		}
		return a
	})
	d.Windows = windows
	return d.Network(), nil
}
