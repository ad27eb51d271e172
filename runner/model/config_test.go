package model

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/runner/compute"
)

const base = `"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4`

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{` + base + `, "num_key_value_heads": 2, "head_dim": null, "eos_token_id": [7, 8],
		"bos_token_id": 1, "rope_theta": 500000, "tie_word_embeddings": false,
		"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
		"quantization": {"group_size": 64, "bits": 4, "mode": "affine",
			"model.embed_tokens": false, "lm_head": {"bits": 8, "group_size": 32}, "model.layers.1.mlp.down_proj": {"bits": 6}},
		"quantization_config": {"group_size": 64, "bits": 4}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.NumKVHeads != 2 || c.HeadDim != 16 || c.RopeTheta != 500000 || c.RMSNormEps != 1e-6 {
		t.Fatalf("shape fields: %+v", c)
	}
	if len(c.EOS) != 2 || c.EOS[1] != 8 || len(c.BOS) != 1 || c.BOS[0] != 1 || c.TieWordEmbeddings == nil || *c.TieWordEmbeddings {
		t.Fatalf("token fields: eos %v bos %v tie %v", c.EOS, c.BOS, c.TieWordEmbeddings)
	}
	if s := c.RopeScaling; s.Type != "llama3" || s.Factor != 8 || s.HighFreqFactor != 4 || s.OriginalMaxPositions != 8192 {
		t.Fatalf("rope scaling: %+v", s)
	}
	if _, err := c.RoPE(); err != nil {
		t.Fatal(err)
	}
	has := func(name string) bool { return name != "model.norm.scales" }
	q := c.Quantization
	for module, want := range map[string]compute.Quant{
		"model.embed_tokens":              {},
		"lm_head":                         {Mode: quant.Affine, Bits: 8, GroupSize: 32},
		"model.layers.1.mlp.down_proj":    {Mode: quant.Affine, Bits: 6, GroupSize: 64},
		"model.layers.0.self_attn.q_proj": {Mode: quant.Affine, Bits: 4, GroupSize: 64},
		"model.norm":                      {}, // no scales in the checkpoint
	} {
		if got := q.For(module, has); got != want {
			t.Errorf("%s: %+v, want %+v", module, got, want)
		}
	}
}

func TestParseConfigVariants(t *testing.T) {
	// transformers 5 spelling: rope_parameters carries rope_theta; yarn fields.
	c, err := ParseConfig([]byte(`{` + base + `, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
		"original_max_position_embeddings": 32768, "beta_fast": 16, "truncate": false}, "eos_token_id": 5,
		"quantization": {"group_size": 32, "bits": 4, "mode": "mxfp4"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.RopeTheta != 1e6 || c.RopeScaling.Type != "yarn" || c.RopeScaling.BetaFast != 16 || !c.RopeScaling.NoTruncate || len(c.EOS) != 1 {
		t.Fatalf("%+v", c)
	}
	if d := c.Quantization.Default; d.Mode != quant.MXFP4 || d.Bits != 4 || d.GroupSize != 32 {
		t.Fatalf("mxfp4 default: %+v", d)
	}
	// Old spelling "type".
	c, err = ParseConfig([]byte(`{` + base + `, "rope_scaling": {"type": "linear", "factor": 2.0}}`))
	if err != nil || c.RopeScaling.Type != "linear" || c.RopeTheta != 10000 {
		t.Fatalf("%v %+v", err, c)
	}
	for _, bad := range []struct{ json, want string }{
		{`"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}`, "default, linear, llama3, yarn"},
		{`"quantization": {"group_size": 48, "bits": 4}`, "group size 48"},
		{`"quantization_config": {"quant_method": "gptq"}`, "gptq"},
		{`"num_key_value_heads": 3`, "multiple"},
		{`"eos_token_id": "x"`, "eos_token_id"},
	} {
		_, err := ParseConfig([]byte(`{` + base + `, ` + bad.json + `}`))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want one mentioning %q", bad.json, err, bad.want)
		}
	}
	if _, err := ParseConfig([]byte(`{"model_type": "llama"}`)); err == nil || !strings.Contains(err.Error(), "must be a positive integer") {
		t.Errorf("missing sizes: %v", err)
	}
}

func TestReadConfigMergesGenerationEOS(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{`+base+`, "eos_token_id": 7}`), 0o644)
	os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id": [9, 7]}`), 0o644)
	c, err := ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.EOS) != 2 || c.EOS[0] != 7 || c.EOS[1] != 9 {
		t.Fatalf("EOS %v, want [7 9]", c.EOS)
	}
}

// Phi-3's longrope: the factors from rope_scaling, the original length beside it (and
// preferred), the early "su" spelling; Ministral 3's llama_4_scaling_beta.
func TestParseConfigLongropeAndQueryScale(t *testing.T) {
	c, err := ParseConfig([]byte(`{` + base + `, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
		"partial_rotary_factor": 0.75, "rope_scaling": {"type": "su", "short_factor": [1, 1, 1, 1, 1, 1], "long_factor": [2, 2, 2, 2, 2, 2],
		"original_max_position_embeddings": 8192}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := c.RopeScaling
	if s.Type != "longrope" || s.OriginalMaxPositions != 4096 || len(s.LongFactor) != 6 || s.LongFactor[0] != 2 {
		t.Fatalf("longrope: %+v", s)
	}
	r, err := c.RoPE()
	if err != nil || r.Dims != 12 || r.Switch != 4096 || r.LongInvFreq == nil {
		t.Fatalf("RoPE: %+v, %v", r, err)
	}
	if _, err := ParseConfig([]byte(`{` + base + `, "rope_scaling": {"type": "longrope", "short_factor": "x"}}`)); err == nil {
		t.Error("a short_factor that is not a list was accepted")
	}
	c, err = ParseConfig([]byte(`{` + base + `, "max_position_embeddings": 4096, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6,
		"factor": 16.0, "original_max_position_embeddings": 16, "llama_4_scaling_beta": 0.1}}`))
	if err != nil {
		t.Fatal(err)
	}
	rope, _ := c.RoPE()
	q, err := c.QueryRoPE(rope)
	if err != nil || c.QueryScaleBeta != 0.1 || q == rope || q.PosScale.Period != 16 {
		t.Fatalf("query scale: beta %v, %+v, %v", c.QueryScaleBeta, q, err)
	}
}
