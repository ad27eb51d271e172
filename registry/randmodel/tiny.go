package randmodel

import "fmt"

// tinyPresets are the tiny shapes of the architectures whose defaults (Tiny) do not
// make a valid model, by config.json's model_type. An architecture this package writes
// with Tiny's shape needs no entry.
var tinyPresets = map[string]func(vocab int) Config{
	"qwen3_moe":      TinyMoE,
	"gemma3_text":    TinyGemma3,
	"gemma3":         TinyGemma3Multimodal,
	"qwen3_next":     TinyQwen3Next,
	"gpt_oss":        TinyGptOss,
	"gemma4_text":    TinyGemma4,
	"gemma4":         TinyGemma4MoE,
	"gemma4_unified": TinyGemma4Unified,
	"glm4_moe":       TinyGlm4Moe,
	"glm4_moe_lite":  TinyGlm4MoeLite,
	"mistral":        TinyMistral,
	"ministral3":     TinyMinistral3,
	"mistral3":       TinyMistral3,
	"phi3":           TinyPhi3,
	"qwen2_5_vl":     TinyQwen25VL,
	"qwen3_5":        TinyQwen35,
	"qwen3_5_moe":    TinyQwen35MoE,
}

// TinyQwen25VL is Tiny's qwen2 as the language model of a Qwen2.5-VL: Generate writes
// it with TinyQwen25Vision's tower.
func TinyQwen25VL(vocab int) Config {
	c := Tiny("qwen2", vocab)
	c.Arch = "qwen2_5_vl"
	return c
}

// TinyQwen35MoE is TinyQwen3Next as the language model of a Qwen3.5/3.6 with experts:
// Generate writes it in Qwen3.5's layout with TinyQwenVision's tower.
func TinyQwen35MoE(vocab int) Config {
	c := TinyQwen3Next(vocab)
	c.Arch = "qwen3_5_moe"
	return c
}

// TinyQwen35 is TinyQwen35MoE without experts (a dense SwiGLU in every layer), as the
// dense Qwen3.5 models are.
func TinyQwen35(vocab int) Config {
	c := TinyQwen35MoE(vocab)
	c.Arch = "qwen3_5"
	c.NumExperts, c.TopK, c.MoEIntermediate, c.NormTopK, c.SharedExpertInter = 0, 0, 0, false, 0
	return c
}

// TinyOf is the tiny float32 model of the architecture registered under modelType,
// for checks that run every architecture (`mlxg doctor`): its preset, or Tiny's shape.
// It fails for an architecture this package cannot write yet.
func TinyOf(modelType string, vocab int) (Config, error) {
	c := Tiny(modelType, vocab)
	if preset, ok := tinyPresets[modelType]; ok {
		c = preset(vocab)
	}
	if _, ok := archNames[c.Arch]; !ok {
		return Config{}, fmt.Errorf("registry/randmodel does not write %s checkpoints yet", modelType)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%v (add a tiny preset for %s in registry/randmodel/tiny.go)", err, modelType)
	}
	return c, nil
}
