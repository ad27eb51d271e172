package registry

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry/safetensors"
)

func TestReadInfoQwen3Tiny(t *testing.T) {
	dir := testdata.SharedModel(t, "qwen3-tiny")
	m, err := ReadInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Qwen3 with tied embeddings, counted from the config's shapes.
	const vocab, hidden, inter, layers, heads, kv, hd = 151936, 256, 768, 6, 4, 2, 64
	perLayer := hidden*heads*hd + 2*hidden*kv*hd + heads*hd*hidden + 2*hd + 3*hidden*inter + 2*hidden
	want := int64(vocab*hidden + layers*perLayer + hidden)
	if m.Parameters != want {
		t.Errorf("parameters = %d, want %d", m.Parameters, want)
	}
	if m.Architecture != "Qwen3ForCausalLM" || m.ModelType != "qwen3" || m.DType != "F16" || m.Quantization != nil {
		t.Errorf("arch %q type %q dtype %q quant %v", m.Architecture, m.ModelType, m.DType, m.Quantization)
	}
	if m.ContextLength != 4096 || m.EmbeddingLength != 256 || m.Layers != 6 || m.KVHeads != 2 || m.HeadDim != 64 {
		t.Errorf("context %d embedding %d layers %d kv heads %d head dim %d", m.ContextLength, m.EmbeddingLength, m.Layers, m.KVHeads, m.HeadDim)
	}
	if got := m.KVLayers(); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5}) {
		t.Errorf("KV layers = %v", got)
	}
	if m.ChatTemplate == "" {
		t.Error("no chat template found")
	}
	if m.ParameterSize() != HumanNumber(want) || m.QuantizationLevel() != "F16" {
		t.Errorf("parameter size %q, level %q", m.ParameterSize(), m.QuantizationLevel())
	}
}

// writeMLXCheckpoint writes a small quantized MLX-style checkpoint: a 4-bit embedding, an 8-bit
// down_proj (a mixed recipe), an unquantized norm, and a hybrid layer layout.
func writeMLXCheckpoint(t *testing.T, dir string) (params int64) {
	t.Helper()
	const vocab, hidden, inter, group = 64, 64, 128, 32
	cfg := map[string]any{
		"architectures": []string{"Qwen3NextForCausalLM"}, "model_type": "qwen3_next",
		"hidden_size": hidden, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
		"max_position_embeddings": 32768, "full_attention_interval": 4, "vocab_size": vocab,
		"quantization": map[string]any{"group_size": group, "bits": 4, "mode": "affine",
			"model.layers.0.mlp.down_proj": map[string]any{"group_size": group, "bits": 8}, "lm_head": false},
	}
	b, _ := json.Marshal(cfg)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"chat_template":[{"name":"default","template":"{{ x }}"}]}`), 0o644)
	os.WriteFile(filepath.Join(dir, "LICENSE"), []byte("MIT License\n\nCopyright"), 0o644)
	tensor := func(name string, dt safetensors.DType, shape ...int) safetensors.Tensor {
		n := dt.Size()
		for _, d := range shape {
			n *= d
		}
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i*7 + len(name))
		}
		return safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: dt, Shape: shape}, Data: data}
	}
	ts := []safetensors.Tensor{
		tensor("model.embed_tokens.weight", safetensors.U32, vocab, hidden*4/32),
		tensor("model.embed_tokens.scales", safetensors.BF16, vocab, hidden/group),
		tensor("model.embed_tokens.biases", safetensors.BF16, vocab, hidden/group),
		tensor("model.layers.0.mlp.down_proj.weight", safetensors.U32, hidden, inter*8/32),
		tensor("model.layers.0.mlp.down_proj.scales", safetensors.BF16, hidden, inter/group),
		tensor("model.layers.0.mlp.down_proj.biases", safetensors.BF16, hidden, inter/group),
		tensor("model.norm.weight", safetensors.BF16, hidden),
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	return vocab*hidden + hidden*inter + hidden
}

func TestReadInfoQuantizedHybrid(t *testing.T) {
	dir := t.TempDir()
	want := writeMLXCheckpoint(t, dir)
	m, err := ReadInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Parameters != want {
		t.Errorf("parameters = %d, want %d", m.Parameters, want)
	}
	q := m.Quantization
	if q == nil || q.Bits != 4 || q.GroupSize != 32 || q.Mode != "affine" {
		t.Fatalf("quantization = %+v", q)
	}
	if got := q.For("model.layers.0.mlp.down_proj"); got.Bits != 8 {
		t.Errorf("down_proj override = %+v", got)
	}
	if got := q.For("lm_head"); got.Bits != 0 {
		t.Errorf("lm_head should be unquantized: %+v", got)
	}
	if m.QuantizationLevel() != "mixed-4/8bit" || m.DType != "BF16" {
		t.Errorf("level %q dtype %q", m.QuantizationLevel(), m.DType)
	}
	if got := m.KVLayers(); !slices.Equal(got, []int{3, 7}) {
		t.Errorf("KV layers = %v, want [3 7]", got)
	}
	if m.ChatTemplate != "{{ x }}" || m.License != "MIT License\n\nCopyright" || m.ContextLength != 32768 {
		t.Errorf("template %q license %q context %d", m.ChatTemplate, m.License, m.ContextLength)
	}
}

func TestQuantizationLevelAndHumanNumber(t *testing.T) {
	for _, c := range []struct {
		q    Quantization
		want string
	}{
		{Quantization{Bits: 4, GroupSize: 64, Mode: "affine"}, "4bit"},
		{Quantization{Bits: 3, GroupSize: 32, Mode: "affine"}, "3bit-g32"},
		{Quantization{Bits: 4, GroupSize: 32, Mode: "mxfp4"}, "mxfp4"},
	} {
		if got := c.q.Level(); got != c.want {
			t.Errorf("%+v.Level() = %q, want %q", c.q, got, c.want)
		}
	}
	for n, want := range map[int64]string{596049920: "596.05M", 8_000_000_000: "8B", 1_720_574_976: "1.7B", 44_000_000: "44M", 12_345: "12K", 999: "999"} {
		if got := HumanNumber(n); got != want {
			t.Errorf("HumanNumber(%d) = %q, want %q", n, got, want)
		}
	}
}
