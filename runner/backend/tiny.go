package backend

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/mlxg/mlxg/registry/safetensors"
)

// The tiny model CheckModel runs: a Qwen3 (per-head q/k norms, grouped-query attention)
// of 2 layers, hidden size 128, 4 heads over 2 KV heads of 32, vocabulary 512, float32.
// It is written here rather than by the test generator (registry/randmodel) so that the
// checks `mlxg doctor` runs bring no test code into the program.
const (
	tinyVocab, tinyHidden, tinyInter, tinyLayers = 512, 128, 256, 2
	tinyHeads, tinyKVHeads, tinyHeadDim          = 4, 2, 32
)

// TinyModel writes the small random checkpoint CheckModel loads into dir (created if
// needed); the same seed writes the same weights.
func TinyModel(dir string, seed uint64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	config := map[string]any{
		"architectures":           []string{"Qwen3ForCausalLM"},
		"model_type":              "qwen3",
		"vocab_size":              tinyVocab,
		"hidden_size":             tinyHidden,
		"intermediate_size":       tinyInter,
		"num_hidden_layers":       tinyLayers,
		"num_attention_heads":     tinyHeads,
		"num_key_value_heads":     tinyKVHeads,
		"head_dim":                tinyHeadDim,
		"hidden_act":              "silu",
		"max_position_embeddings": 4096,
		"rms_norm_eps":            1e-6,
		"rope_theta":              10000,
		"tie_word_embeddings":     false,
		"torch_dtype":             "float32",
	}
	data, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}

	// Scales keep activations near unit size so the logits spread: linear weights
	// uniform with standard deviation 1/sqrt(fan-in), norm weights 1 ± 0.2, and small
	// embeddings, so the layers rather than the input token dominate the output.
	r := rand.New(rand.NewPCG(seed, 0x74696e79))
	var tensors []safetensors.Tensor
	add := func(name string, center, scale float32, shape ...int) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		b := make([]byte, 4*n)
		for i := range n {
			v := center + scale*float32(2*r.Float64()-1)
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		tensors = append(tensors, safetensors.Tensor{
			TensorInfo: safetensors.TensorInfo{Name: name, DType: safetensors.F32, Shape: shape},
			Data:       b,
		})
	}
	lin := func(name string, out, in int) { add(name, 0, float32(math.Sqrt(3/float64(in))), out, in) }
	norm := func(name string, n int) { add(name, 1, 0.2, n) }
	q, kv := tinyHeads*tinyHeadDim, tinyKVHeads*tinyHeadDim

	add("model.embed_tokens.weight", 0, 0.1, tinyVocab, tinyHidden)
	for i := range tinyLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		norm(p+"input_layernorm.weight", tinyHidden)
		lin(p+"self_attn.q_proj.weight", q, tinyHidden)
		lin(p+"self_attn.k_proj.weight", kv, tinyHidden)
		lin(p+"self_attn.v_proj.weight", kv, tinyHidden)
		lin(p+"self_attn.o_proj.weight", tinyHidden, q)
		norm(p+"self_attn.q_norm.weight", tinyHeadDim)
		norm(p+"self_attn.k_norm.weight", tinyHeadDim)
		norm(p+"post_attention_layernorm.weight", tinyHidden)
		lin(p+"mlp.gate_proj.weight", tinyInter, tinyHidden)
		lin(p+"mlp.up_proj.weight", tinyInter, tinyHidden)
		lin(p+"mlp.down_proj.weight", tinyHidden, tinyInter)
	}
	norm("model.norm.weight", tinyHidden)
	lin("lm_head.weight", tinyVocab, tinyHidden)
	return safetensors.Write(filepath.Join(dir, "model.safetensors"), tensors, map[string]string{"format": "pt"})
}
