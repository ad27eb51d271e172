package gptoss_test

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"

	_ "github.com/mlxg/mlxg/runner/gptoss"
)

// The fixtures in testdata are written by testdata/ref.py on a machine with torch and
// transformers: tiny random gpt-oss checkpoints made with save_pretrained (float32, in
// Hugging Face's layout) and, per case and per variant, transformers' last-position
// logits of the prompt and its greedy continuation, in float64.
//
// The quantized variants' references are computed by ref.py itself on dequantized
// weights: it quantizes the tensors `mlxg create` quantizes with numpy code that repeats
// internal/quant's arithmetic (MLX's affine and mxfp4 quantizers) in float32, so the
// weights transformers ran are the ones the converted checkpoint decodes to.

// convert makes variant name of the Hugging Face checkpoint hf in the MLX layout: the
// shared float and affine variants, and gpt-oss's two mxfp4 ones.
func convert(t *testing.T, hf, name string) string {
	t.Helper()
	switch name {
	case "mxfp4": // mlx-community's MXFP4-Q8
		return modeltest.ConvertWith(t, hf, name, create.Options{Bits: 8, GroupSize: 64, Experts: quant.MXFP4})
	case "mxfp4-experts": // OpenAI's layout: experts already in mxfp4, converted as they are
		return modeltest.ConvertWith(t, openAIMXFP4(t, hf), name, create.Options{})
	}
	return modeltest.Convert(t, hf, name)
}

// openAIMXFP4 writes hf as OpenAI ships gpt-oss: each expert matrix as
// <proj>_blocks [experts, out, in/32, 16] (two e2m1 codes a byte, the low nibble first)
// and <proj>_scales [experts, out, in/32] (e8m0), gate and up rows interleaved in
// gate_up_proj, and a quantization_config of quant_method mxfp4.
func openAIMXFP4(t *testing.T, hf string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "openai")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenDir(hf)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var ts []safetensors.Tensor
	for _, n := range ck.Names() {
		src, _ := ck.Tensor(n)
		if !strings.HasSuffix(n, "experts.gate_up_proj") && !strings.HasSuffix(n, "experts.down_proj") {
			ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: n, DType: src.DType, Shape: src.Shape}, Data: src.Data})
			continue
		}
		vals, err := src.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		E, in, out := src.Shape[0], src.Shape[1], src.Shape[2] // [experts, in, out]
		blocks, scales := make([]byte, E*out*in/2), make([]byte, E*out*in/32)
		row, packed := make([]float32, in), make([]uint32, in/8)
		for e := 0; e < E; e++ {
			for o := 0; o < out; o++ {
				for i := range row {
					row[i] = vals[(e*in+i)*out+o]
				}
				r := e*out + o
				quant.QuantizeMXFP4Row(packed, scales[r*in/32:(r+1)*in/32], row)
				for w, word := range packed {
					binary.LittleEndian.PutUint32(blocks[r*in/2+4*w:], word)
				}
			}
		}
		ts = append(ts,
			safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: n + "_blocks", DType: safetensors.U8, Shape: []int{E, out, in / 32, 16}}, Data: blocks},
			safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: n + "_scales", DType: safetensors.U8, Shape: []int{E, out, in / 32}}, Data: scales})
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(hf, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["quantization_config"] = map[string]any{"quant_method": "mxfp4",
		"modules_to_not_convert": []string{"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLogitsAgainstTransformers loads every case's every variant on the CPU backend
// with float32 caches (the sliding layers' window kept exactly) and checks it against
// transformers (modeltest.CheckRef).
func TestLogitsAgainstTransformers(t *testing.T) {
	modeltest.CheckAgainstTransformers(t, cpu.New(2), "runner/gptoss/testdata/ref.py", []string{"f32", "q4", "q8", "mxfp4", "mxfp4-experts"}, convert)
}

// TestHuggingFaceLayoutRefused: the fused experts of the Hugging Face layout are not
// read as they are; the error says to convert.
func TestHuggingFaceLayoutRefused(t *testing.T) {
	_, err := model.Load(filepath.Join("testdata", "gptoss-a"), cpu.New(1))
	if err == nil || !strings.Contains(err.Error(), "mlxg create") {
		t.Fatalf("loading the Hugging Face layout: %v, want an error pointing to mlxg create", err)
	}
}

// TestChunksAndCaches: the prompt in one pass, in chunks of 1 and 5, and through the
// fp16 caches (Rotating on the sliding layers) give the same logits; the model's caches
// are windowed on the sliding layers.
func TestChunksAndCaches(t *testing.T) {
	m, err := model.Load(convert(t, filepath.Join("testdata", "gptoss-a"), "q4"), cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := modeltest.Tokens(3, 40)
	caches, _ := m.NewCaches(true)
	want := modeltest.Forward(t, m, caches, p, len(p))
	for _, chunk := range []int{1, 5} {
		caches, _ := m.NewCaches(true)
		if r := modeltest.MaxRel(modeltest.Forward(t, m, caches, p, chunk), want); r > 1e-5 {
			t.Errorf("chunks of %d differ from one pass by %.3g", chunk, r)
		}
	}
	fp16, _ := m.NewCaches(false)
	if r := modeltest.MaxRel(modeltest.Forward(t, m, fp16, p, 7), want); r > 2e-2 {
		t.Errorf("fp16 caches differ from float32 by %.3g", r)
	}
}
