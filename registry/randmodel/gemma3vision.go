package randmodel

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/mlxg/mlxg/registry/safetensors"
)

// Gemma3Vision is the shape of Gemma 3's SigLIP vision tower (Hugging Face's vision_config)
// and the image tokens of its multimodal config.
type Gemma3Vision struct {
	Hidden       int     `json:"hidden_size"`
	Intermediate int     `json:"intermediate_size"`
	Layers       int     `json:"num_hidden_layers"`
	Heads        int     `json:"num_attention_heads"`
	Channels     int     `json:"num_channels"`
	ImageSize    int     `json:"image_size"`
	Patch        int     `json:"patch_size"`
	Eps          float64 `json:"layer_norm_eps"`
	Act          string  `json:"hidden_act"`
	// Tokens is mm_tokens_per_image; Image, BOI and EOI the token ids of
	// <image_soft_token>, <start_of_image> and <end_of_image>.
	Tokens          int   `json:"-"`
	Image, BOI, EOI int32 `json:"-"`
}

// Gemma 3's image tokens in its tokenizer.
const (
	Gemma3BOI   = 255999
	Gemma3EOI   = 256000
	Gemma3Image = 262144
)

// TinyGemma3Vision is a two-layer tower of width 32 over 32×32 images in 4-pixel patches
// (an 8×8 grid), pooled 2×2 to 16 tokens an image, with Gemma 3's token ids (a language
// model of Gemma 3's vocabulary, 262,208, holds them).
func TinyGemma3Vision() Gemma3Vision {
	return Gemma3Vision{Hidden: 32, Intermediate: 48, Layers: 2, Heads: 2, Channels: 3, ImageSize: 32, Patch: 4,
		Eps: 1e-6, Act: "gelu_pytorch_tanh", Tokens: 16, Image: Gemma3Image, BOI: Gemma3BOI, EOI: Gemma3EOI}
}

// TinyGemma3Multimodal is TinyGemma3 as the language model of a multimodal Gemma 3
// (model_type gemma3): Generate writes it with TinyGemma3Vision's tower in Hugging
// Face's layout, the image tokens moved inside a vocabulary smaller than Gemma 3's.
func TinyGemma3Multimodal(vocab int) Config {
	c := TinyGemma3(vocab)
	c.Arch = "gemma3"
	return c
}

// generateGemma3 is Generate for Arch gemma3: the gemma3_text model, then the tower.
func generateGemma3(dir string, c Config, opts Options) error {
	c.Arch = "gemma3_text"
	if err := Generate(dir, c, opts); err != nil {
		return err
	}
	v := TinyGemma3Vision()
	if c.VocabSize <= Gemma3Image {
		v.Image, v.BOI, v.EOI = int32(c.VocabSize-6), int32(c.VocabSize-5), int32(c.VocabSize-4)
	}
	return AddGemma3Vision(dir, v, opts.Seed, true)
}

// AddGemma3Vision turns the gemma3_text checkpoint in dir (written by Generate from a
// TinyGemma3-like config) into a multimodal Gemma 3 with a random tower of shape v, in
// mlx-vlm's layout (as mlx-community's conversions ship it): config.json of model_type
// gemma3 with the text fields in text_config, vision_config and the image tokens; the
// language model's tensors under language_model.model.*; the tower under
// vision_tower.vision_model.* and the projector under multi_modal_projector.* in
// vision.safetensors (float32, the patch embedding channels-last as MLX's Conv2d keeps
// it); preprocessor_config.json (Gemma3ImageProcessor) and processor_config.json. With hf
// set it writes Hugging Face's names instead (transformers 5: model.language_model.*,
// model.vision_tower.*, model.multi_modal_projector.*, the kernel [out, channels, patch,
// patch]), which `mlxg create` turns into the MLX layout.
func AddGemma3Vision(dir string, v Gemma3Vision, seed uint64, hf bool) error {
	cfgPath := filepath.Join(dir, "config.json")
	text, err := readJSONMap(cfgPath)
	if err != nil {
		return err
	}
	if text["model_type"] != "gemma3_text" {
		return fmt.Errorf("randmodel: %s is a %v checkpoint, not gemma3_text", cfgPath, text["model_type"])
	}
	out := int(text["hidden_size"].(float64))
	vocab := int(text["vocab_size"].(float64))
	if int(v.Image) >= vocab || int(v.BOI) >= vocab || int(v.EOI) >= vocab {
		return fmt.Errorf("randmodel: the image tokens %d, %d and %d need a vocabulary above %d", v.BOI, v.EOI, v.Image, vocab)
	}
	vc := map[string]any{}
	b, _ := json.Marshal(v)
	_ = json.Unmarshal(b, &vc)
	vc["model_type"] = "siglip_vision_model"
	vc["vision_use_head"] = false
	text["mm_tokens_per_image"] = v.Tokens
	cfg := map[string]any{
		"model_type": "gemma3", "architectures": []string{"Gemma3ForConditionalGeneration"},
		"text_config": text, "vision_config": vc, "mm_tokens_per_image": v.Tokens,
		"image_token_index": v.Image, "boi_token_index": v.BOI, "eoi_token_index": v.EOI,
		"initializer_range": 0.02, "torch_dtype": "float32",
	}
	if tie, ok := text["tie_word_embeddings"]; ok {
		cfg["tie_word_embeddings"] = tie
	}
	for _, k := range []string{"eos_token_id", "bos_token_id", "pad_token_id"} {
		if x, ok := text[k]; ok {
			cfg[k] = x
		}
	}
	if err := writeJSON(cfgPath, cfg); err != nil {
		return err
	}
	pre := map[string]any{
		"image_processor_type": "Gemma3ImageProcessor", "processor_class": "Gemma3Processor",
		"do_resize": true, "do_rescale": true, "do_normalize": true, "do_convert_rgb": true, "do_pan_and_scan": nil,
		"rescale_factor": 1.0 / 255, "image_mean": []float64{0.5, 0.5, 0.5}, "image_std": []float64{0.5, 0.5, 0.5},
		"resample": 2, "size": map[string]int{"height": v.ImageSize, "width": v.ImageSize},
		"image_seq_length": v.Tokens,
	}
	if err := writeJSON(filepath.Join(dir, "preprocessor_config.json"), pre); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "processor_config.json"), map[string]any{"image_seq_length": v.Tokens, "processor_class": "Gemma3Processor"}); err != nil {
		return err
	}
	if err := renameText(dir, hf); err != nil {
		return err
	}

	h := v.Hidden
	lin := func(name string, o, i int) []TensorSpec {
		s := float32(math.Sqrt(3 / float64(i)))
		return []TensorSpec{{Name: name + ".weight", Shape: []int{o, i}, scale: s}, {Name: name + ".bias", Shape: []int{o}, scale: 0.1}}
	}
	norm := func(name string) []TensorSpec {
		return []TensorSpec{{Name: name + ".weight", Shape: []int{h}, center: 1, scale: 0.2}, {Name: name + ".bias", Shape: []int{h}, scale: 0.1}}
	}
	p := "vision_tower.vision_model."
	in := v.Channels * v.Patch * v.Patch
	grid := v.ImageSize / v.Patch
	specs := []TensorSpec{
		{Name: p + "embeddings.patch_embedding.weight", Shape: []int{h, v.Patch, v.Patch, v.Channels}, scale: float32(math.Sqrt(3 / float64(in)))},
		{Name: p + "embeddings.patch_embedding.bias", Shape: []int{h}, scale: 0.1},
		{Name: p + "embeddings.position_embedding.weight", Shape: []int{grid * grid, h}, scale: 0.5},
	}
	for i := range v.Layers {
		l := fmt.Sprintf("%sencoder.layers.%d.", p, i)
		specs = append(specs, norm(l+"layer_norm1")...)
		specs = append(specs, norm(l+"layer_norm2")...)
		for _, proj := range []string{"q_proj", "k_proj", "v_proj", "out_proj"} {
			specs = append(specs, lin(l+"self_attn."+proj, h, h)...)
		}
		specs = append(specs, lin(l+"mlp.fc1", v.Intermediate, h)...)
		specs = append(specs, lin(l+"mlp.fc2", h, v.Intermediate)...)
	}
	specs = append(specs, norm(p+"post_layernorm")...)
	specs = append(specs,
		// Gemma's RMSNorm scales by 1 + w: weights around 0.
		TensorSpec{Name: "multi_modal_projector.mm_soft_emb_norm.weight", Shape: []int{h}, scale: 0.2},
		TensorSpec{Name: "multi_modal_projector.mm_input_projection_weight", Shape: []int{h, out}, scale: float32(math.Sqrt(3 / float64(h)))})
	tensors := make([]safetensors.Tensor, len(specs))
	for i, s := range specs {
		t := safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: s.Name, DType: safetensors.F32, Shape: s.Shape},
			Data: fill(s, safetensors.F32, seed)}
		if hf {
			t.Name = "model." + t.Name
			if len(s.Shape) == 4 { // [out, P, P, C] -> [out, C, P, P]
				o, P, C := s.Shape[0], s.Shape[1], s.Shape[3]
				src, dst := t.Data, make([]byte, len(t.Data))
				for a := range o {
					for y := range P {
						for x := range P {
							for c := range C {
								from := ((a*P+y)*P+x)*C + c
								to := ((a*C+c)*P+y)*P + x
								copy(dst[4*to:4*to+4], src[4*from:4*from+4])
							}
						}
					}
				}
				t.Data, t.Shape = dst, []int{o, C, P, P}
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

// renameText moves the text model's tensors of dir to the multimodal names:
// language_model.model.* (language_model.lm_head), or with hf model.language_model.*
// (lm_head).
func renameText(dir string, hf bool) error {
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return err
	}
	var ts []safetensors.Tensor
	for _, name := range ck.Names() {
		t, _ := ck.Tensor(name)
		out := name
		switch rest, ok := strings.CutPrefix(name, "model."); {
		case ok && hf:
			out = "model.language_model." + rest
		case ok:
			out = "language_model.model." + rest
		case name == "lm_head.weight" && !hf:
			out = "language_model.lm_head.weight"
		}
		c := safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: out, DType: t.DType, Shape: t.Shape}, Data: append([]byte(nil), t.Data...)}
		ts = append(ts, c)
	}
	ck.Close()
	files, err := filepath.Glob(filepath.Join(dir, "model*.safetensors"))
	if err != nil {
		return err
	}
	for _, f := range append(files, filepath.Join(dir, "model.safetensors.index.json")) {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"})
}
