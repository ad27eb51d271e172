package randmodel

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/mlxg/mlxg/registry/safetensors"
)

// Gemma4Vision is the shape of Gemma 4's vision tower (Hugging Face's vision_config), its
// image processor's budget and the image tokens of its multimodal config.
type Gemma4Vision struct {
	Hidden       int     `json:"hidden_size"`
	Intermediate int     `json:"intermediate_size"`
	Layers       int     `json:"num_hidden_layers"`
	Heads        int     `json:"num_attention_heads"`
	KVHeads      int     `json:"num_key_value_heads"`
	HeadDim      int     `json:"head_dim"`
	Patch        int     `json:"patch_size"`
	PosSize      int     `json:"position_embedding_size"`
	Pool         int     `json:"pooling_kernel_size"`
	Eps          float64 `json:"rms_norm_eps"`
	Act          string  `json:"hidden_activation"`
	Standardize  bool    `json:"standardize"`
	// Clipped writes use_clipped_linears with finite bounds on every linear of the
	// encoder: inputs within ±1.5, outputs within ±1 (bounds the tiny tower's activations
	// pass, so that the clamps change its features).
	Clipped bool `json:"use_clipped_linears"`
	// MaxSoftTokens is the processor's max_soft_tokens; Image, BOI and EOI the ids of
	// <|image|>, <|image> and <image|>; Bidirectional sets the language model's
	// use_bidirectional_attention to "vision".
	MaxSoftTokens   int   `json:"-"`
	Image, BOI, EOI int32 `json:"-"`
	Bidirectional   bool  `json:"-"`
}

// TinyGemma4Vision is a two-layer tower of width 32 (two heads of 16) reading 4-pixel
// patches pooled 2×2, with a budget of 70 tokens an image (280 patches), std
// standardisation, and image tokens 250 to 252 (inside a vocabulary of 256).
func TinyGemma4Vision() Gemma4Vision {
	return Gemma4Vision{Hidden: 32, Intermediate: 48, Layers: 2, Heads: 2, KVHeads: 2, HeadDim: 16, Patch: 4, PosSize: 160,
		Pool: 2, Eps: 1e-6, Act: "gelu_pytorch_tanh", Standardize: true, MaxSoftTokens: 70, Image: 250, BOI: 251, EOI: 252,
		Bidirectional: true}
}

// TinyGemma4Multimodal is TinyGemma4 in the multimodal layout (model_type gemma4, the
// language model under model.language_model.*) without the double-wide MLP, as E2B and
// E4B ship it: per-layer embeddings, a sliding window of 8, the last two layers
// KV-shared (one sliding, one full). AddGemma4Vision gives it a tower.
func TinyGemma4Multimodal(vocab int) Config {
	c := TinyGemma4(vocab)
	c.Arch, c.DoubleWideMLP = "gemma4", false
	return c
}

// AddGemma4Vision adds a random tower of shape v to the multimodal Gemma 4 checkpoint in
// dir (written by Generate with Arch gemma4: the language model under
// model.language_model.*): vision_config, the image token ids and (with v.Bidirectional)
// use_bidirectional_attention "vision" in config.json; preprocessor_config.json
// (Gemma4ImageProcessor) and processor_config.json; the tower in vision.safetensors
// (float32) under vision_tower.* with each linear under .linear and the projector under
// embed_vision.*, as mlx-vlm's conversions keep them, or with hf Hugging Face's
// model.vision_tower.* and model.embed_vision.*.
func AddGemma4Vision(dir string, v Gemma4Vision, seed uint64, hf bool) error {
	cfgPath := filepath.Join(dir, "config.json")
	cfg, err := readJSONMap(cfgPath)
	if err != nil {
		return err
	}
	text, ok := cfg["text_config"].(map[string]any)
	if cfg["model_type"] != "gemma4" || !ok {
		return fmt.Errorf("randmodel: %s is a %v checkpoint, not a gemma4 one with text_config", cfgPath, cfg["model_type"])
	}
	out := int(text["hidden_size"].(float64))
	vocab := int(text["vocab_size"].(float64))
	if int(v.Image) >= vocab || int(v.BOI) >= vocab || int(v.EOI) >= vocab {
		return fmt.Errorf("randmodel: the image tokens %d, %d and %d need a vocabulary above %d", v.Image, v.BOI, v.EOI, vocab)
	}
	vc := map[string]any{}
	b, _ := json.Marshal(v)
	_ = json.Unmarshal(b, &vc)
	vc["model_type"] = "gemma4_vision"
	vc["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 100.0}
	vc["default_output_length"] = v.MaxSoftTokens
	cfg["vision_config"] = vc
	cfg["image_token_id"], cfg["boi_token_id"], cfg["eoi_token_id"] = v.Image, v.BOI, v.EOI
	text["pad_token_id"] = 0
	if v.Bidirectional {
		text["use_bidirectional_attention"] = "vision"
	}
	if err := writeJSON(cfgPath, cfg); err != nil {
		return err
	}
	pre := map[string]any{
		"image_processor_type": "Gemma4ImageProcessor", "processor_class": "Gemma4Processor",
		"do_resize": true, "do_rescale": true, "do_normalize": false, "do_convert_rgb": true,
		"rescale_factor": 1.0 / 255, "image_mean": []float64{0, 0, 0}, "image_std": []float64{1, 1, 1},
		"resample": 3, "patch_size": v.Patch, "pooling_kernel_size": v.Pool, "max_soft_tokens": v.MaxSoftTokens,
	}
	if err := writeJSON(filepath.Join(dir, "preprocessor_config.json"), pre); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "processor_config.json"), map[string]any{"image_seq_length": v.MaxSoftTokens, "processor_class": "Gemma4Processor"}); err != nil {
		return err
	}

	h, hd := v.Hidden, v.HeadDim
	lin := func(name string, o, i int) TensorSpec {
		return TensorSpec{Name: name + ".linear.weight", Shape: []int{o, i}, scale: float32(math.Sqrt(3 / float64(i)))}
	}
	norm := func(name string, n int) TensorSpec {
		return TensorSpec{Name: name + ".weight", Shape: []int{n}, center: 1, scale: 0.2}
	}
	p := "vision_tower."
	in := 3 * v.Patch * v.Patch
	specs := []TensorSpec{
		{Name: p + "patch_embedder.input_proj.weight", Shape: []int{h, in}, scale: float32(math.Sqrt(3 / float64(in)))},
		{Name: p + "patch_embedder.position_embedding_table", Shape: []int{2, v.PosSize, h}, scale: 0.5},
	}
	for i := range v.Layers {
		l := fmt.Sprintf("%sencoder.layers.%d.", p, i)
		for _, n := range []string{"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"} {
			specs = append(specs, norm(l+n, h))
		}
		specs = append(specs,
			lin(l+"self_attn.q_proj", v.Heads*hd, h), lin(l+"self_attn.k_proj", v.KVHeads*hd, h),
			lin(l+"self_attn.v_proj", v.KVHeads*hd, h), lin(l+"self_attn.o_proj", h, v.Heads*hd),
			norm(l+"self_attn.q_norm", hd), norm(l+"self_attn.k_norm", hd),
			lin(l+"mlp.gate_proj", v.Intermediate, h), lin(l+"mlp.up_proj", v.Intermediate, h), lin(l+"mlp.down_proj", h, v.Intermediate))
	}
	if v.Standardize {
		specs = append(specs, TensorSpec{Name: p + "std_bias", Shape: []int{h}, scale: 0.5},
			TensorSpec{Name: p + "std_scale", Shape: []int{h}, center: 1, scale: 0.3})
	}
	specs = append(specs, TensorSpec{Name: "embed_vision.embedding_projection.weight", Shape: []int{out, h}, scale: float32(math.Sqrt(3 / float64(h)))})
	tensors := make([]safetensors.Tensor, len(specs))
	for i, s := range specs {
		t := safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: s.Name, DType: safetensors.F32, Shape: s.Shape},
			Data: fill(s, safetensors.F32, seed)}
		tensors[i] = t
	}
	if v.Clipped {
		for _, s := range specs {
			base, ok := strings.CutSuffix(s.Name, ".linear.weight")
			if !ok {
				continue
			}
			for _, b := range []struct {
				name string
				v    float32
			}{{"input_min", -1.5}, {"input_max", 1.5}, {"output_min", -1}, {"output_max", 1}} {
				data := make([]byte, 4)
				binary.LittleEndian.PutUint32(data, math.Float32bits(b.v))
				tensors = append(tensors, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: base + "." + b.name, DType: safetensors.F32, Shape: []int{}}, Data: data})
			}
		}
	}
	if hf {
		for i := range tensors {
			tensors[i].Name = "model." + tensors[i].Name
		}
	}
	format := "mlx"
	if hf {
		format = "pt"
	}
	return safetensors.Write(filepath.Join(dir, "vision.safetensors"), tensors, map[string]string{"format": format})
}
