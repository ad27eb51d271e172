package randmodel

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"

	"github.com/mlxg/mlxg/registry/safetensors"
)

// Qwen25Vision is the shape of a Qwen2.5-VL vision tower (Hugging Face's vision_config).
type Qwen25Vision struct {
	Depth        int    `json:"depth"`
	Hidden       int    `json:"hidden_size"`
	Act          string `json:"hidden_act"`
	Intermediate int    `json:"intermediate_size"`
	Heads        int    `json:"num_heads"`
	InChannels   int    `json:"in_channels"`
	Patch        int    `json:"patch_size"`
	Merge        int    `json:"spatial_merge_size"`
	Temporal     int    `json:"temporal_patch_size"`
	Window       int    `json:"window_size"`
	FullAttn     []int  `json:"fullatt_block_indexes"`
	// Pixels bound preprocessor_config.json's budget (min_pixels, max_pixels).
	MinPixels, MaxPixels int `json:"-"`
}

// TinyQwen25Vision is a three-block tower of width 32 over 4-pixel patches (8×8 pixels a
// language-model token), windows of 16 pixels (2×2 tokens) with block 1 attending over
// the whole image, and a pixel budget of 16 to 1,024 tokens.
func TinyQwen25Vision() Qwen25Vision {
	return Qwen25Vision{Depth: 3, Hidden: 32, Act: "silu", Intermediate: 48, Heads: 2, InChannels: 3, Patch: 4, Merge: 2,
		Temporal: 2, Window: 16, FullAttn: []int{1}, MinPixels: 16 * 64, MaxPixels: 1024 * 64}
}

// AddQwen25Vision turns the float32 Qwen2 checkpoint in dir (Generate's, flat config.json)
// into a Qwen2.5-VL one with a random tower of shape v in mlx-vlm's layout: model_type
// qwen2_5_vl with an M-RoPE rope_scaling, vision_tower.* in vision.safetensors (the patch
// embedding channels-last as MLX's Conv3d keeps it), vision_config and the image tokens
// in config.json, and preprocessor_config.json.
func AddQwen25Vision(dir string, v Qwen25Vision, seed uint64) error {
	return addQwen25Vision(dir, v, seed, false)
}

// AddQwen25VisionHF is AddQwen25Vision in the layout of Qwen's own checkpoints: the same
// values under visual.*, the patch embedding's kernel as [out, channels, temporal, patch,
// patch] (what `mlxg create` turns back into AddQwen25Vision's tensors).
func AddQwen25VisionHF(dir string, v Qwen25Vision, seed uint64) error {
	return addQwen25Vision(dir, v, seed, true)
}

func addQwen25Vision(dir string, v Qwen25Vision, seed uint64, hf bool) error {
	cfgPath := filepath.Join(dir, "config.json")
	cfg, err := readJSONMap(cfgPath)
	if err != nil {
		return err
	}
	if cfg["model_type"] != "qwen2" {
		return fmt.Errorf("randmodel: %s is not a qwen2 checkpoint", cfgPath)
	}
	out := int(cfg["hidden_size"].(float64))
	hd := out / int(cfg["num_attention_heads"].(float64))
	if h, ok := cfg["head_dim"].(float64); ok {
		hd = int(h)
	}
	n := hd / 2 // Qwen2.5-VL's [16, 24, 24] of 64 frequencies, scaled
	t := n / 4
	hh := (n - t) / 2
	cfg["model_type"] = "qwen2_5_vl"
	cfg["architectures"] = []string{"Qwen2_5_VLForConditionalGeneration"}
	cfg["rope_scaling"] = map[string]any{"type": "mrope", "mrope_section": []int{t, hh, n - t - hh}}
	vc := map[string]any{}
	b, _ := json.Marshal(v)
	_ = json.Unmarshal(b, &vc)
	vc["out_hidden_size"] = out
	vc["model_type"] = "qwen2_5_vl"
	vc["tokens_per_second"] = 2
	cfg["vision_config"] = vc
	cfg["image_token_id"], cfg["video_token_id"] = QwenImagePad, QwenImagePad+1
	cfg["vision_start_token_id"], cfg["vision_end_token_id"] = QwenVisionStart, QwenVisionEnd
	if err := writeJSON(cfgPath, cfg); err != nil {
		return err
	}
	pre := map[string]any{
		"image_processor_type": "Qwen2VLImageProcessor", "do_resize": true, "do_rescale": true, "do_normalize": true,
		"rescale_factor": 1.0 / 255, "image_mean": []float64{0.48145466, 0.4578275, 0.40821073},
		"image_std": []float64{0.26862954, 0.26130258, 0.27577711}, "patch_size": v.Patch, "temporal_patch_size": v.Temporal,
		"merge_size": v.Merge, "resample": 3, "min_pixels": v.MinPixels, "max_pixels": v.MaxPixels,
	}
	if err := writeJSON(filepath.Join(dir, "preprocessor_config.json"), pre); err != nil {
		return err
	}
	h, m := v.Hidden, v.Hidden*v.Merge*v.Merge
	lin := func(name string, o, i int) []TensorSpec {
		s := float32(math.Sqrt(3 / float64(i)))
		return []TensorSpec{{Name: name + ".weight", Shape: []int{o, i}, scale: s}, {Name: name + ".bias", Shape: []int{o}, scale: 0.1}}
	}
	norm := func(name string, n int) TensorSpec {
		return TensorSpec{Name: name + ".weight", Shape: []int{n}, center: 1, scale: 0.2}
	}
	p := "vision_tower."
	in := v.InChannels * v.Temporal * v.Patch * v.Patch
	specs := []TensorSpec{{Name: p + "patch_embed.proj.weight", Shape: []int{h, v.Temporal, v.Patch, v.Patch, v.InChannels}, scale: float32(math.Sqrt(3 / float64(in)))}}
	for i := range v.Depth {
		b := fmt.Sprintf("%sblocks.%d.", p, i)
		specs = append(specs, norm(b+"norm1", h), norm(b+"norm2", h))
		specs = append(specs, lin(b+"attn.qkv", 3*h, h)...)
		specs = append(specs, lin(b+"attn.proj", h, h)...)
		specs = append(specs, lin(b+"mlp.gate_proj", v.Intermediate, h)...)
		specs = append(specs, lin(b+"mlp.up_proj", v.Intermediate, h)...)
		specs = append(specs, lin(b+"mlp.down_proj", h, v.Intermediate)...)
	}
	specs = append(specs, norm(p+"merger.ln_q", h))
	specs = append(specs, lin(p+"merger.mlp.0", m, m)...)
	specs = append(specs, lin(p+"merger.mlp.2", out, m)...)
	tensors := make([]safetensors.Tensor, len(specs))
	for i, s := range specs {
		t := safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: s.Name, DType: safetensors.F32, Shape: s.Shape},
			Data: fill(s, safetensors.F32, seed)}
		if hf {
			t.Name = "visual." + t.Name[len(p):]
			if len(s.Shape) == 5 {
				t.Data, t.Shape = channelsFirst(t.Data, s.Shape)
			}
		}
		tensors[i] = t
	}
	format := "mlx"
	if hf {
		format = "pt"
	}
	return safetensors.Write(filepath.Join(dir, "vision.safetensors"), tensors, map[string]string{"format": format})
}

// channelsFirst turns a float32 Conv3d kernel [out, T, P, P, C] into [out, C, T, P, P].
func channelsFirst(src []byte, shape []int) ([]byte, []int) {
	o, T, P, C := shape[0], shape[1], shape[2], shape[4]
	dst := make([]byte, len(src))
	for a := range o {
		for tt := range T {
			for y := range P {
				for x := range P {
					for c := range C {
						from := (((a*T+tt)*P+y)*P+x)*C + c
						to := (((a*C+c)*T+tt)*P+y)*P + x
						copy(dst[4*to:4*to+4], src[4*from:4*from+4])
					}
				}
			}
		}
	}
	return dst, []int{o, C, T, P, P}
}
