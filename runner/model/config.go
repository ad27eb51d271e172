package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/runner/compute"
)

// Config is what the architectures read from config.json. Raw keeps every key for
// architecture-specific fields.
type Config struct {
	ModelType        string
	Architectures    []string
	VocabSize        int
	HiddenSize       int
	IntermediateSize int
	NumLayers        int
	NumHeads         int
	NumKVHeads       int // num_key_value_heads, defaulting to NumHeads
	HeadDim          int // head_dim, defaulting to HiddenSize/NumHeads
	MaxPositions     int // max_position_embeddings
	RMSNormEps       float32
	RopeTheta        float64
	RopeScaling      compute.RoPEScaling
	// QueryScaleBeta is rope_parameters' llama_4_scaling_beta (Ministral 3): queries
	// scaled by 1 + beta·ln(1 + floor(position / original_max_position_embeddings)).
	QueryScaleBeta    float64
	PartialRotary     float64 // partial_rotary_factor, 1 when absent
	TieWordEmbeddings *bool   // nil when config.json does not say
	BOS               []int32
	EOS               []int32 // from config.json and generation_config.json, deduplicated
	Quantization      *Quantization
	Raw               map[string]json.RawMessage
}

// Quantization is config.json's MLX "quantization" block: a default and per-module
// overrides, where an override of false marks a module as not quantized.
type Quantization struct {
	Default compute.Quant
	Modules map[string]*compute.Quant // nil value: not quantized
}

// For returns how module (a weight's key without ".weight") is stored. As in mlx-lm,
// an override wins; otherwise a module is quantized when the checkpoint holds its
// scales.
func (q *Quantization) For(module string, has func(name string) bool) compute.Quant {
	if q == nil {
		return compute.Quant{}
	}
	if o, ok := q.Modules[module]; ok {
		if o == nil {
			return compute.Quant{}
		}
		return *o
	}
	if has(module + ".scales") {
		return q.Default
	}
	return compute.Quant{}
}

// ReadConfig parses dir/config.json and, when present, dir/generation_config.json.
func ReadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the model config: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if gen, err := os.ReadFile(filepath.Join(dir, "generation_config.json")); err == nil {
		var g struct {
			EOS json.RawMessage `json:"eos_token_id"`
		}
		if err := json.Unmarshal(gen, &g); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "generation_config.json"), err)
		}
		ids, err := tokenIDs(g.EOS)
		if err != nil {
			return nil, fmt.Errorf("%s: eos_token_id: %w", filepath.Join(dir, "generation_config.json"), err)
		}
		c.EOS = mergeIDs(c.EOS, ids)
	}
	return c, nil
}

// ParseConfig parses the contents of a config.json.
func ParseConfig(data []byte) (*Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if raw["num_hidden_layers"] == nil && raw["text_config"] != nil {
		var err error
		if data, raw, err = textConfig(raw); err != nil {
			return nil, err
		}
	}
	c := &Config{Raw: raw, PartialRotary: 1}
	var f struct {
		ModelType         string          `json:"model_type"`
		Architectures     []string        `json:"architectures"`
		VocabSize         int             `json:"vocab_size"`
		HiddenSize        int             `json:"hidden_size"`
		IntermediateSize  int             `json:"intermediate_size"`
		NumLayers         int             `json:"num_hidden_layers"`
		NumHeads          int             `json:"num_attention_heads"`
		NumKVHeads        *int            `json:"num_key_value_heads"`
		HeadDim           *int            `json:"head_dim"`
		MaxPositions      int             `json:"max_position_embeddings"`
		RMSNormEps        *float64        `json:"rms_norm_eps"`
		RopeTheta         *float64        `json:"rope_theta"`
		PartialRotary     *float64        `json:"partial_rotary_factor"`
		OrigMaxPositions  int             `json:"original_max_position_embeddings"`
		RopeScaling       map[string]any  `json:"rope_scaling"`
		RopeParameters    map[string]any  `json:"rope_parameters"`
		TieWordEmbeddings *bool           `json:"tie_word_embeddings"`
		BOS               json.RawMessage `json:"bos_token_id"`
		EOS               json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("unexpected field type: %w", err)
	}
	c.ModelType, c.Architectures = f.ModelType, f.Architectures
	c.VocabSize, c.HiddenSize, c.IntermediateSize = f.VocabSize, f.HiddenSize, f.IntermediateSize
	c.NumLayers, c.NumHeads, c.MaxPositions = f.NumLayers, f.NumHeads, f.MaxPositions
	c.TieWordEmbeddings = f.TieWordEmbeddings
	for name, v := range map[string]int{"vocab_size": c.VocabSize, "hidden_size": c.HiddenSize, "num_hidden_layers": c.NumLayers, "num_attention_heads": c.NumHeads} {
		if v <= 0 {
			return nil, fmt.Errorf("%s must be a positive integer, got %d", name, v)
		}
	}
	c.NumKVHeads = c.NumHeads
	if f.NumKVHeads != nil {
		c.NumKVHeads = *f.NumKVHeads
	}
	if c.NumKVHeads <= 0 || c.NumHeads%c.NumKVHeads != 0 {
		return nil, fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumHeads, c.NumKVHeads)
	}
	c.HeadDim = c.HiddenSize / c.NumHeads
	if f.HeadDim != nil {
		c.HeadDim = *f.HeadDim
	}
	if c.HeadDim <= 0 {
		return nil, fmt.Errorf("head_dim must be positive, got %d", c.HeadDim)
	}
	c.RMSNormEps = 1e-6
	if f.RMSNormEps != nil {
		c.RMSNormEps = float32(*f.RMSNormEps)
	}
	if f.PartialRotary != nil {
		c.PartialRotary = *f.PartialRotary
	}
	rope := f.RopeScaling
	if rope == nil {
		rope = f.RopeParameters // transformers 5 spelling, which also carries rope_theta
	}
	c.RopeTheta = 10000
	if v, ok := rope["rope_theta"].(float64); ok {
		c.RopeTheta = v
	}
	if f.RopeTheta != nil {
		c.RopeTheta = *f.RopeTheta
	}
	if v, ok := rope["partial_rotary_factor"].(float64); ok {
		c.PartialRotary = v
	}
	var err error
	if c.RopeScaling, err = parseRoPE(rope); err != nil {
		return nil, err
	}
	if f.OrigMaxPositions > 0 && c.RopeScaling.Type == "longrope" {
		// Phi-3 keeps the pretraining length beside rope_scaling, and transformers
		// prefers it there.
		c.RopeScaling.OriginalMaxPositions = f.OrigMaxPositions
	}
	if v, ok := rope["llama_4_scaling_beta"].(float64); ok && v != 0 {
		c.QueryScaleBeta = v
	}
	if c.BOS, err = tokenIDs(f.BOS); err != nil {
		return nil, fmt.Errorf("bos_token_id: %w", err)
	}
	if c.EOS, err = tokenIDs(f.EOS); err != nil {
		return nil, fmt.Errorf("eos_token_id: %w", err)
	}
	if c.Quantization, err = parseQuantization(raw); err != nil {
		return nil, err
	}
	return c, nil
}

// RoPE builds the rotary embedding the config describes. Proportional RoPE spans the
// whole head, partial_rotary_factor saying how many of its frequencies are not zero.
func (c *Config) RoPE() (*compute.RoPE, error) {
	if c.RopeScaling.Type == "proportional" {
		s := c.RopeScaling
		s.Proportion = c.PartialRotary
		return compute.NewRoPE(c.HeadDim, c.RopeTheta, s, c.MaxPositions)
	}
	dims := int(float64(c.HeadDim) * c.PartialRotary)
	return compute.NewRoPE(dims, c.RopeTheta, c.RopeScaling, c.MaxPositions)
}

// LayerRoPE builds the rotary embedding of one kind of layer from its own
// rope_parameters block (transformers 5 keeps one per layer type: Gemma 3 and 4) over
// heads of headDim columns, theta unless the block sets rope_theta, read as
// ParseConfig reads a model-wide block.
func LayerRoPE(params map[string]any, headDim, maxPositions int, theta float64) (*compute.RoPE, error) {
	c := &Config{HeadDim: headDim, MaxPositions: maxPositions, RopeTheta: theta, PartialRotary: 1}
	if v, ok := params["rope_theta"].(float64); ok {
		c.RopeTheta = v
	}
	if v, ok := params["partial_rotary_factor"].(float64); ok {
		c.PartialRotary = v
	}
	var err error
	if c.RopeScaling, err = parseRoPE(params); err != nil {
		return nil, err
	}
	return c.RoPE()
}

// QueryRoPE is the rotary embedding of the queries: rope itself, or with
// llama_4_scaling_beta a copy that also scales each position's queries (the factor is
// linear, so it folds into cos and sin).
func (c *Config) QueryRoPE(rope *compute.RoPE) (*compute.RoPE, error) {
	if c.QueryScaleBeta == 0 {
		return rope, nil
	}
	if rope.Dims != c.HeadDim {
		return nil, fmt.Errorf("llama_4_scaling_beta with partial rotary embeddings (%d of %d dims) is not supported", rope.Dims, c.HeadDim)
	}
	period := c.RopeScaling.OriginalMaxPositions
	if period == 0 {
		period = c.MaxPositions
	}
	return rope.WithPosScale(compute.PosScale{Beta: c.QueryScaleBeta, Period: period})
}

func parseRoPE(m map[string]any) (compute.RoPEScaling, error) {
	var s compute.RoPEScaling
	if m == nil {
		return s, nil
	}
	num := func(key string) float64 { v, _ := m[key].(float64); return v }
	s.Type, _ = m["rope_type"].(string)
	if s.Type == "" {
		s.Type, _ = m["type"].(string)
	}
	if s.Type == "mrope" {
		s.Type = "default" // Qwen2-VL and Qwen2.5-VL configs' name for M-RoPE, whose sections are read apart
	}
	if s.Type == "su" {
		s.Type = "longrope" // early Phi-3 configs' name for it
	}
	switch s.Type {
	case "", "default", "linear", "llama3", "yarn", "proportional", "longrope":
	default:
		return s, fmt.Errorf("rope scaling type %q is not supported (supported: %s)", s.Type, compute.SupportedRoPE)
	}
	s.Factor = num("factor")
	s.LowFreqFactor, s.HighFreqFactor = num("low_freq_factor"), num("high_freq_factor")
	s.OriginalMaxPositions = int(num("original_max_position_embeddings"))
	s.BetaFast, s.BetaSlow = num("beta_fast"), num("beta_slow")
	s.AttentionFactor = num("attention_factor")
	s.MScale, s.MScaleAllDim = num("mscale"), num("mscale_all_dim")
	if t, ok := m["truncate"].(bool); ok && !t {
		s.NoTruncate = true
	}
	var err error
	if s.ShortFactor, err = floats(m, "short_factor"); err == nil {
		s.LongFactor, err = floats(m, "long_factor")
	}
	return s, err
}

// floats reads a list of numbers (longrope's factors); absent is nil.
func floats(m map[string]any, key string) ([]float64, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("rope scaling %s: want a list of numbers, got %v", key, v)
	}
	out := make([]float64, len(list))
	for i, x := range list {
		if out[i], ok = x.(float64); !ok {
			return nil, fmt.Errorf("rope scaling %s[%d]: want a number, got %v", key, i, x)
		}
	}
	return out, nil
}

// tokenIDs reads an id, a list of ids, or null.
func tokenIDs(raw json.RawMessage) ([]int32, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int32
	if json.Unmarshal(raw, &one) == nil {
		return []int32{one}, nil
	}
	var many []int32
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("want a token id or a list of ids, got %s", raw)
	}
	return many, nil
}

func mergeIDs(a, b []int32) []int32 {
	out := append([]int32(nil), a...)
	for _, id := range b {
		dup := false
		for _, x := range out {
			dup = dup || x == id
		}
		if !dup {
			out = append(out, id)
		}
	}
	return out
}

type quantParams struct {
	GroupSize *int    `json:"group_size"`
	Bits      *int    `json:"bits"`
	Mode      *string `json:"mode"`
}

// parseQuantization reads "quantization" (mlx-lm), else an MLX-style "quantization_config".
func parseQuantization(raw map[string]json.RawMessage) (*Quantization, error) {
	block, key := raw["quantization"], "quantization"
	if block == nil {
		block, key = raw["quantization_config"], "quantization_config"
		if block == nil {
			return nil, nil
		}
		var probe map[string]json.RawMessage
		if json.Unmarshal(block, &probe) == nil {
			if qm, ok := probe["quant_method"]; ok && probe["bits"] == nil {
				hint := ""
				if string(qm) == `"fp8"` {
					hint = "; `mlxg create NAME --from DIR` converts FP8 weights"
				}
				return nil, fmt.Errorf("quantization_config.quant_method %s is not supported: mlxg runs MLX checkpoints (a \"quantization\" block with bits and group_size) or float weights%s", qm, hint)
			}
		}
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(block, &entries); err != nil {
		return nil, fmt.Errorf("%s: want an object, got %s", key, block)
	}
	q := &Quantization{Modules: map[string]*compute.Quant{}}
	var base quantParams
	if err := json.Unmarshal(block, &base); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	def := compute.Quant{Mode: quant.Affine, Bits: 4, GroupSize: 64}
	var err error
	if q.Default, err = applyParams(def, base, key); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for name := range entries {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		v := entries[name]
		switch name {
		case "group_size", "bits", "mode", "quant_method", "linear_class", "quantization_mode":
			continue
		}
		s := strings.TrimSpace(string(v))
		switch {
		case s == "false":
			q.Modules[name] = nil
		case s == "true":
			d := q.Default
			q.Modules[name] = &d
		case strings.HasPrefix(s, "{"):
			var p quantParams
			if err := json.Unmarshal(v, &p); err != nil {
				return nil, fmt.Errorf("%s.%s: %w", key, name, err)
			}
			o, err := applyParams(q.Default, p, key+"."+name)
			if err != nil {
				return nil, err
			}
			q.Modules[name] = &o
		}
	}
	return q, nil
}

func applyParams(q compute.Quant, p quantParams, where string) (compute.Quant, error) {
	if p.Mode != nil {
		q.Mode = quant.Mode(*p.Mode)
		if bits, group, err := quant.FPParams(q.Mode); err == nil {
			q.Bits, q.GroupSize = bits, group // the float modes' fixed parameters, unless given
		}
	}
	if p.Bits != nil {
		q.Bits = *p.Bits
	}
	if p.GroupSize != nil {
		q.GroupSize = *p.GroupSize
	}
	switch q.Mode {
	case quant.Affine:
		if err := quant.CheckAffine(q.Bits, q.GroupSize); err != nil {
			return q, fmt.Errorf("%s: %w", where, err)
		}
	case quant.MXFP4, quant.MXFP8, quant.NVFP4:
	default:
		return q, fmt.Errorf("%s: quantization mode %q is not supported (affine, mxfp4, mxfp8, nvfp4)", where, q.Mode)
	}
	return q, nil
}
