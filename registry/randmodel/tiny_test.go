package randmodel

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/registry/safetensors"
)

// TinyOf gives every architecture this package writes a valid tiny shape, its preset
// where it has one, and refuses the others by name.
func TestTinyOf(t *testing.T) {
	for arch := range archNames {
		c, err := TinyOf(arch, 256)
		if err != nil || c.Arch != arch || c.VocabSize != 256 {
			t.Errorf("%s: %+v %v", arch, c, err)
		}
	}
	if c, _ := TinyOf("qwen3_moe", 256); c.NumExperts == 0 {
		t.Errorf("qwen3_moe without its preset's experts: %+v", c)
	}
	if _, err := TinyOf("gpt2", 256); err == nil || !strings.Contains(err.Error(), "does not write gpt2 checkpoints") {
		t.Errorf("an unknown architecture: %v", err)
	}
}

// The multimodal Qwen types are written as Qwen ships them: the wrapper's model_type and
// architecture, the language model of the right kind (experts only for qwen3_5_moe) and a
// tower in Hugging Face's names.
func TestTinyQwenMultimodal(t *testing.T) {
	for _, c := range []struct {
		arch, text, tower, expert string
	}{
		{"qwen2_5_vl", "", "visual.blocks.0.attn.qkv.weight", ""},
		{"qwen3_5", "qwen3_5_text", "model.visual.blocks.0.attn.qkv.weight", ""},
		{"qwen3_5_moe", "qwen3_5_moe_text", "model.visual.blocks.0.attn.qkv.weight", "model.language_model.layers.0.mlp.experts.gate_up_proj"},
	} {
		cfg, err := TinyOf(c.arch, 256)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), c.arch)
		if err := Generate(dir, cfg, Options{Seed: 3}); err != nil {
			t.Fatalf("%s: %v", c.arch, err)
		}
		raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		var hf struct {
			ModelType     string         `json:"model_type"`
			Architectures []string       `json:"architectures"`
			Text          map[string]any `json:"text_config"`
			Vision        map[string]any `json:"vision_config"`
		}
		if err := json.Unmarshal(raw, &hf); err != nil {
			t.Fatal(err)
		}
		text := ""
		if hf.Text != nil {
			text, _ = hf.Text["model_type"].(string)
		}
		if hf.ModelType != c.arch || len(hf.Architectures) != 1 || hf.Architectures[0] != archNames[c.arch] || text != c.text || hf.Vision == nil {
			t.Errorf("%s: config.json %s", c.arch, raw)
		}
		names := map[string]bool{}
		hs, err := safetensors.ReadDirHeaders(dir)
		if err != nil {
			t.Fatal(err)
		}
		experts := false
		for _, h := range hs {
			for _, tn := range h.Tensors {
				names[tn.Name] = true
				experts = experts || strings.Contains(tn.Name, ".experts.")
			}
		}
		if !names[c.tower] || experts != (c.expert != "") || (c.expert != "" && !names[c.expert]) {
			t.Errorf("%s: tower %s %v, experts %v (want %q)", c.arch, c.tower, names[c.tower], experts, c.expert)
		}
	}
}
