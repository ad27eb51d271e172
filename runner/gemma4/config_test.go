package gemma4_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/gemma4"
	"github.com/mlxg/mlxg/runner/model"
)

// e2bConfig is the shape of Gemma 4 E2B's config.json as its model card's checkpoints
// write it (multimodal: text_config nested, the towers' configs left out here).
func e2bConfig() string {
	types := make([]string, 35)
	for i := range types {
		types[i] = `"sliding_attention"`
		if i%5 == 4 {
			types[i] = `"full_attention"`
		}
	}
	return `{"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"], "tie_word_embeddings": true,
		"eos_token_id": [1, 106],
		"text_config": {"model_type": "gemma4_text", "hidden_size": 1536, "num_hidden_layers": 35,
		"num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256, "global_head_dim": 512,
		"num_global_key_value_heads": null, "attention_k_eq_v": false, "sliding_window": 512, "vocab_size": 262144,
		"vocab_size_per_layer_input": 262144, "hidden_size_per_layer_input": 256, "num_kv_shared_layers": 20,
		"use_double_wide_mlp": true, "intermediate_size": 6144, "max_position_embeddings": 131072,
		"rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": 30.0,
		"enable_moe_block": false,
		"rope_parameters": {"full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
			"sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}},
		"layer_types": [` + strings.Join(types, ",") + `]},
		"quantization": {"group_size": 64, "bits": 4, "mode": "affine"}}`
}

// An E2B config.json: the text model read through text_config, the last 20 layers reading
// layers 13 (sliding) and 14 (full), and the KV policy planning 15 layers, the full ones
// of 512 columns.
func TestE2BConfig(t *testing.T) {
	cfg, err := model.ParseConfig([]byte(e2bConfig()))
	if err != nil {
		t.Fatal(err)
	}
	if err := model.CheckConfig([]byte(e2bConfig())); err != nil {
		t.Fatal(err)
	}
	g, err := gemma4.ReadConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sliding, err := g.Sliding(cfg.NumLayers)
	if err != nil {
		t.Fatal(err)
	}
	src, err := g.Sources(sliding)
	if err != nil {
		t.Fatal(err)
	}
	for i := 15; i < 35; i++ {
		want := 13
		if !sliding[i] {
			want = 14
		}
		if src[i] != want {
			t.Errorf("layer %d reads layer %d's KV, want %d", i, src[i], want)
		}
	}
	if cfg.Quantization == nil || cfg.Quantization.Default.Bits != 4 || g.PerLayerInput != 256 || g.GlobalKVHeads != nil {
		t.Errorf("config: %+v, %+v", cfg, g)
	}
	shape, err := kvstore.ShapeFromConfig([]byte(e2bConfig()), 0)
	if err != nil {
		t.Fatal(err)
	}
	var kv []int
	for i, l := range shape.Layers {
		if l.Kind.HasKV() {
			kv = append(kv, i)
			if want := map[bool]int{true: 256, false: 512}[sliding[i]]; l.KHeadDim != want || l.KVHeads != 1 {
				t.Errorf("layer %d: %+v", i, l)
			}
		}
	}
	if len(kv) != 15 || kv[14] != 14 {
		t.Errorf("KV layers %v, want 0..14", kv)
	}
	if !slices.Contains(model.Supported(), "gemma4") || !slices.Contains(model.Supported(), "gemma4_text") {
		t.Errorf("registered: %v", model.Supported())
	}
}
