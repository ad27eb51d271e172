package randmodel

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"

	"github.com/mlxg/mlxg/registry/safetensors"
)

// QwenVision is the shape of a Qwen3.5/3.6 vision tower (Hugging Face's vision_config).
type QwenVision struct {
	Depth        int    `json:"depth"`
	Hidden       int    `json:"hidden_size"`
	Act          string `json:"hidden_act"`
	Intermediate int    `json:"intermediate_size"`
	Heads        int    `json:"num_heads"`
	InChannels   int    `json:"in_channels"`
	Patch        int    `json:"patch_size"`
	Merge        int    `json:"spatial_merge_size"`
	Temporal     int    `json:"temporal_patch_size"`
	NumPositions int    `json:"num_position_embeddings"`
	// Pixels bound preprocessor_config.json's budget (size.shortest_edge, longest_edge).
	MinPixels, MaxPixels int `json:"-"`
}

// TinyQwenVision is a two-block tower of width 32 over 4-pixel patches (8×8 pixels a
// language-model token), a 4×4 learned position grid, and a pixel budget of 16 to
// 1,024 tokens.
func TinyQwenVision() QwenVision {
	return QwenVision{Depth: 2, Hidden: 32, Act: "gelu_pytorch_tanh", Intermediate: 64, Heads: 2, InChannels: 3,
		Patch: 4, Merge: 2, Temporal: 2, NumPositions: 16, MinPixels: 16 * 64, MaxPixels: 1024 * 64}
}

// Qwen's image placeholders: <|vision_start|>, <|vision_end|> and <|image_pad|>.
const (
	QwenVisionStart = 151652
	QwenVisionEnd   = 151653
	QwenImagePad    = 151655
)

// AddQwenVision gives the Qwen3.5/3.6 checkpoint in dir (MLX layout, config.json with
// text_config) a random tower of shape v in mlx-vlm's layout: vision_tower.* in
// vision.safetensors (float32, the patch embedding channels-last as MLX's Conv3d keeps
// it), vision_config and the image tokens in config.json, and preprocessor_config.json.
func AddQwenVision(dir string, v QwenVision, seed uint64) error {
	return addQwenVision(dir, v, seed, false)
}

// AddQwenVisionHF is AddQwenVision in Hugging Face's layout: the same values under
// model.visual.*, the patch embedding's kernel as [out, channels, temporal, patch, patch]
// (what `mlxg create` turns back into AddQwenVision's tensors).
func AddQwenVisionHF(dir string, v QwenVision, seed uint64) error {
	return addQwenVision(dir, v, seed, true)
}

func addQwenVision(dir string, v QwenVision, seed uint64, hf bool) error {
	cfgPath := filepath.Join(dir, "config.json")
	cfg, err := readJSONMap(cfgPath)
	if err != nil {
		return err
	}
	text, ok := cfg["text_config"].(map[string]any)
	if !ok {
		return fmt.Errorf("randmodel: %s has no text_config: not a Qwen3.5 checkpoint", cfgPath)
	}
	out := int(text["hidden_size"].(float64))
	if err := mropeSection(text); err != nil {
		return err
	}
	vc := map[string]any{}
	b, _ := json.Marshal(v)
	_ = json.Unmarshal(b, &vc)
	vc["out_hidden_size"] = out
	vc["model_type"] = "qwen3_5"
	cfg["vision_config"] = vc
	cfg["image_token_id"], cfg["video_token_id"] = QwenImagePad, QwenImagePad+1
	cfg["vision_start_token_id"], cfg["vision_end_token_id"] = QwenVisionStart, QwenVisionEnd
	if err := writeJSON(cfgPath, cfg); err != nil {
		return err
	}
	pre := map[string]any{
		"image_processor_type": "Qwen2VLImageProcessorFast", "do_resize": true, "do_rescale": true, "do_normalize": true,
		"rescale_factor": 1.0 / 255, "image_mean": []float64{0.5, 0.5, 0.5}, "image_std": []float64{0.5, 0.5, 0.5},
		"patch_size": v.Patch, "temporal_patch_size": v.Temporal, "merge_size": v.Merge, "resample": 3,
		"size": map[string]int{"shortest_edge": v.MinPixels, "longest_edge": v.MaxPixels},
	}
	if err := writeJSON(filepath.Join(dir, "preprocessor_config.json"), pre); err != nil {
		return err
	}
	h, m := v.Hidden, v.Hidden*v.Merge*v.Merge
	lin := func(name string, o, i int) []TensorSpec {
		s := float32(math.Sqrt(3 / float64(i)))
		return []TensorSpec{{Name: name + ".weight", Shape: []int{o, i}, scale: s}, {Name: name + ".bias", Shape: []int{o}, scale: 0.1}}
	}
	norm := func(name string, n int) []TensorSpec {
		return []TensorSpec{{Name: name + ".weight", Shape: []int{n}, center: 1, scale: 0.2}, {Name: name + ".bias", Shape: []int{n}, scale: 0.1}}
	}
	p := "vision_tower."
	in := v.InChannels * v.Temporal * v.Patch * v.Patch
	specs := []TensorSpec{
		{Name: p + "patch_embed.proj.weight", Shape: []int{h, v.Temporal, v.Patch, v.Patch, v.InChannels}, scale: float32(math.Sqrt(3 / float64(in)))},
		{Name: p + "patch_embed.proj.bias", Shape: []int{h}, scale: 0.1},
		{Name: p + "pos_embed.weight", Shape: []int{v.NumPositions, h}, scale: 0.5},
	}
	for i := range v.Depth {
		b := fmt.Sprintf("%sblocks.%d.", p, i)
		specs = append(specs, norm(b+"norm1", h)...)
		specs = append(specs, norm(b+"norm2", h)...)
		specs = append(specs, lin(b+"attn.qkv", 3*h, h)...)
		specs = append(specs, lin(b+"attn.proj", h, h)...)
		specs = append(specs, lin(b+"mlp.linear_fc1", v.Intermediate, h)...)
		specs = append(specs, lin(b+"mlp.linear_fc2", h, v.Intermediate)...)
	}
	specs = append(specs, norm(p+"merger.norm", h)...)
	specs = append(specs, lin(p+"merger.linear_fc1", m, m)...)
	specs = append(specs, lin(p+"merger.linear_fc2", out, m)...)
	tensors := make([]safetensors.Tensor, len(specs))
	for i, s := range specs {
		t := safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: s.Name, DType: safetensors.F32, Shape: s.Shape},
			Data: fill(s, safetensors.F32, seed)}
		if hf {
			t.Name = "model.visual." + t.Name[len(p):]
			if len(s.Shape) == 5 { // [out, T, P, P, C] -> [out, C, T, P, P]
				o, T, P, C := s.Shape[0], s.Shape[1], s.Shape[2], s.Shape[4]
				src, dst := t.Data, make([]byte, len(t.Data))
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
				t.Data, t.Shape = dst, []int{o, C, T, P, P}
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

// mropeSection gives text_config rope_parameters with an mrope_section over its rotary
// frequencies when it has none, split as Qwen's [11, 11, 10] splits 32.
func mropeSection(text map[string]any) error {
	rp, _ := text["rope_parameters"].(map[string]any)
	if rp == nil {
		rp = map[string]any{"rope_type": "default"}
		if th, ok := text["rope_theta"]; ok {
			rp["rope_theta"] = th
		}
		if pr, ok := text["partial_rotary_factor"]; ok {
			rp["partial_rotary_factor"] = pr
		}
	}
	if _, ok := rp["mrope_section"]; ok {
		return nil
	}
	hd, _ := text["head_dim"].(float64)
	if hd == 0 {
		h, _ := text["hidden_size"].(float64)
		n, _ := text["num_attention_heads"].(float64)
		if n == 0 {
			return fmt.Errorf("randmodel: text_config has no head_dim or num_attention_heads")
		}
		hd = h / n
	}
	pr, ok := rp["partial_rotary_factor"].(float64)
	if !ok {
		if pr, ok = text["partial_rotary_factor"].(float64); !ok {
			pr = 1
		}
	}
	n := int(hd*pr) / 2
	w := n / 3
	h := (n - w) / 2
	rp["mrope_section"] = []int{n - h - w, h, w}
	rp["mrope_interleaved"] = true
	text["rope_parameters"] = rp
	return nil
}
