package kvstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
)

func TestShapeQwen3Tiny(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(testdata.SharedModel(t, "qwen3-tiny"), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := ShapeFromConfig(data, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != 6 || m.MaxContext != 4096 || m.WeightBytes != 1000 {
		t.Fatalf("shape %+v", m)
	}
	for _, l := range m.Layers {
		if l != (LayerShape{Kind: LayerFull, KVHeads: 2, KHeadDim: 64, VHeadDim: 64}) {
			t.Fatalf("layer %+v", l)
		}
	}
}

func TestShapeLayouts(t *testing.T) {
	gemma := `{"model_type":"gemma3","text_config":{"model_type":"gemma3_text","num_hidden_layers":12,"num_attention_heads":8,
		"num_key_value_heads":4,"head_dim":256,"hidden_size":2560,"sliding_window":1024,"sliding_window_pattern":6,"max_position_embeddings":131072}}`
	m, err := ShapeFromConfig([]byte(gemma), 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range m.Layers {
		want := LayerShape{Kind: LayerSliding, KVHeads: 4, KHeadDim: 256, VHeadDim: 256, Window: 1024}
		if i == 5 || i == 11 {
			want.Kind, want.Window = LayerFull, 0
		}
		if l != want {
			t.Errorf("gemma layer %d: %+v", i, l)
		}
	}

	next := `{"model_type":"qwen3_next","num_hidden_layers":8,"num_attention_heads":16,"num_key_value_heads":2,"head_dim":256,
		"full_attention_interval":4,"linear_num_key_heads":16,"linear_num_value_heads":32,"linear_key_head_dim":128,
		"linear_value_head_dim":128,"linear_conv_kernel_dim":4,"max_position_embeddings":262144}`
	m, err = ShapeFromConfig([]byte(next), 0)
	if err != nil {
		t.Fatal(err)
	}
	state := int64(3*(2*16*128+32*128)+32*128*128) * 4
	for i, l := range m.Layers {
		want := LayerShape{Kind: LayerRecurrent, State: state}
		if i == 3 || i == 7 {
			want = LayerShape{Kind: LayerFull, KVHeads: 2, KHeadDim: 256, VHeadDim: 256}
		}
		if l != want {
			t.Errorf("qwen3_next layer %d: %+v, want %+v", i, l, want)
		}
	}

	types := `{"num_hidden_layers":3,"num_attention_heads":4,"hidden_size":256,"sliding_window":128,
		"layer_types":["sliding_attention","full_attention","sliding_attention"]}`
	m, err = ShapeFromConfig([]byte(types), 0)
	if err != nil {
		t.Fatal(err)
	}
	if m.Layers[0].Kind != LayerSliding || m.Layers[0].Window != 128 || m.Layers[1].Kind != LayerFull || m.Layers[0].KHeadDim != 64 || m.Layers[0].KVHeads != 4 {
		t.Errorf("layer_types: %+v", m.Layers)
	}

	mistral := `{"model_type":"mistral","num_hidden_layers":2,"num_attention_heads":32,"num_key_value_heads":8,"hidden_size":4096,"sliding_window":4096}`
	m, _ = ShapeFromConfig([]byte(mistral), 0)
	if m.Layers[1].Kind != LayerSliding || m.Layers[1].Window != 4096 {
		t.Errorf("mistral: %+v", m.Layers)
	}
	// Mistral Small 3.1's text_config (no window), Phi-4-mini's window longer than its
	// context (no window), Phi-3's short one.
	small := `{"model_type":"mistral3","text_config":{"model_type":"mistral","num_hidden_layers":2,"num_attention_heads":32,"num_key_value_heads":8,"hidden_size":5120,"head_dim":128,"sliding_window":null}}`
	m, _ = ShapeFromConfig([]byte(small), 0)
	if len(m.Layers) != 2 || m.Layers[1].Kind != LayerFull || m.Layers[1].KHeadDim != 128 {
		t.Errorf("mistral3: %+v", m.Layers)
	}
	phi4mini := `{"model_type":"phi3","num_hidden_layers":2,"num_attention_heads":24,"num_key_value_heads":8,"hidden_size":3072,"sliding_window":262144,"max_position_embeddings":131072}`
	m, _ = ShapeFromConfig([]byte(phi4mini), 0)
	if m.Layers[1].Kind != LayerFull {
		t.Errorf("phi-4-mini: %+v", m.Layers)
	}
	phi3 := `{"model_type":"phi3","num_hidden_layers":2,"num_attention_heads":32,"hidden_size":3072,"sliding_window":2047,"max_position_embeddings":4096}`
	m, _ = ShapeFromConfig([]byte(phi3), 0)
	if m.Layers[0].Kind != LayerSliding || m.Layers[1].Window != 2047 {
		t.Errorf("phi-3: %+v", m.Layers)
	}
	qwen2 := `{"model_type":"qwen2","num_hidden_layers":2,"num_attention_heads":28,"num_key_value_heads":4,"hidden_size":3584,"sliding_window":131072,"use_sliding_window":false}`
	m, _ = ShapeFromConfig([]byte(qwen2), 0)
	if m.Layers[1].Kind != LayerFull || m.Layers[1].KHeadDim != 128 {
		t.Errorf("qwen2: %+v", m.Layers)
	}
	mla := `{"model_type":"deepseek_v3","num_hidden_layers":1,"num_attention_heads":128,"num_key_value_heads":128,"kv_lora_rank":512,
		"qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,"hidden_size":7168}`
	m, _ = ShapeFromConfig([]byte(mla), 0)
	if m.Layers[0] != (LayerShape{Kind: LayerLatent, KVHeads: 1, KHeadDim: 64, VHeadDim: 512}) { // the latent is cached
		t.Errorf("mla: %+v", m.Layers)
	}
}

func TestShapeErrors(t *testing.T) {
	for name, cfg := range map[string]string{
		"not json":          `{`,
		"no layers":         `{"num_attention_heads":4}`,
		"unknown type":      `{"num_hidden_layers":1,"num_attention_heads":4,"hidden_size":256,"layer_types":["mamba"]}`,
		"types count":       `{"num_hidden_layers":2,"num_attention_heads":4,"hidden_size":256,"layer_types":["full_attention"]}`,
		"sliding no window": `{"num_hidden_layers":1,"num_attention_heads":4,"hidden_size":256,"layer_types":["sliding_attention"]}`,
		"linear no dims":    `{"num_hidden_layers":2,"num_attention_heads":4,"hidden_size":256,"full_attention_interval":2}`,
		"no head dim":       `{"num_hidden_layers":1,"num_attention_heads":4}`,
	} {
		if _, err := ShapeFromConfig([]byte(cfg), 0); err == nil || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

// TestShapeGptOss: without layer_types, gpt-oss's even layers slide (transformers'
// default), as gpt-oss-20b's config describes them.
func TestShapeGptOss(t *testing.T) {
	cfg := `{"model_type":"gpt_oss","num_hidden_layers":24,"num_attention_heads":64,"num_key_value_heads":8,"head_dim":64,
		"hidden_size":2880,"sliding_window":128,"max_position_embeddings":131072}`
	m, err := ShapeFromConfig([]byte(cfg), 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range m.Layers {
		want := LayerShape{Kind: LayerFull, KVHeads: 8, KHeadDim: 64, VHeadDim: 64}
		if i%2 == 0 {
			want.Kind, want.Window = LayerSliding, 128
		}
		if l != want {
			t.Fatalf("layer %d: %+v, want %+v", i, l, want)
		}
	}
}
