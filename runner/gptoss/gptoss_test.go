package gptoss_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
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

type variant struct {
	Logits  []float64 `json:"logits"`
	Greedy  []int32   `json:"greedy"`
	Margins []float64 `json:"margins"`
}

type refCase struct {
	Name     string             `json:"name"`
	Prompt   []int32            `json:"prompt"`
	Variants map[string]variant `json:"variants"`
}

func readRefs(t *testing.T) []refCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []refCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) == 0 {
		t.Fatal("testdata/refs.json has no cases")
	}
	return f.Cases
}

// convert makes variant name of the Hugging Face checkpoint hf in the MLX layout.
func convert(t *testing.T, hf, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	var opts create.Options
	switch name {
	case "f32":
	case "q4":
		opts = create.Options{Bits: 4, GroupSize: 32}
	case "q8":
		opts = create.Options{Bits: 8, GroupSize: 32}
	case "mxfp4": // mlx-community's MXFP4-Q8
		opts = create.Options{Bits: 8, GroupSize: 64, Experts: quant.MXFP4}
	case "mxfp4-experts": // OpenAI's layout: experts already in mxfp4, converted as they are
		hf = openAIMXFP4(t, hf)
	default:
		t.Fatalf("unknown variant %q", name)
	}
	if _, err := create.Convert(context.Background(), hf, out, opts); err != nil {
		t.Fatal(err)
	}
	return out
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

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// TestLogitsAgainstTransformers loads every case's every variant on the CPU backend
// with float32 caches (the sliding layers' window kept exactly) and checks the prompt's
// last-position logits within 1e-4 relative (max|got-want| / max|want|) and the greedy
// tokens, decoded one step at a time through the caches, up to the first step whose
// reference margin between the two best logits is below 1e-3.
func TestLogitsAgainstTransformers(t *testing.T) {
	for _, c := range readRefs(t) {
		hf := filepath.Join("testdata", c.Name)
		for _, name := range []string{"f32", "q4", "q8", "mxfp4", "mxfp4-experts"} {
			ref, ok := c.Variants[name]
			if !ok {
				t.Fatalf("%s: no reference for %s", c.Name, name)
			}
			t.Run(c.Name+"/"+name, func(t *testing.T) {
				m, err := model.Load(convert(t, hf, name), cpu.New(2))
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				caches, err := m.NewCaches(true)
				if err != nil {
					t.Fatal(err)
				}
				logits, err := m.Forward(context.Background(), c.Prompt, caches, false)
				if err != nil {
					t.Fatal(err)
				}
				want := make([]float32, len(ref.Logits))
				for i, v := range ref.Logits {
					want[i] = float32(v)
				}
				if r := modeltest.MaxRel(logits, want); r > 1e-4 || math.IsNaN(r) {
					t.Errorf("last-position logits differ from transformers' by %.3g relative", r)
				} else {
					t.Logf("logits within %.2g of transformers'", r)
				}
				var got []int32
				for step, id := range ref.Greedy {
					next := argmax(logits)
					got = append(got, next)
					if next != id {
						if ref.Margins[step] < 1e-3 {
							t.Logf("step %d: %d, transformers %d by a margin of %.2g: not compared further", step, next, id, ref.Margins[step])
							break
						}
						t.Fatalf("greedy tokens %v, transformers %v (margins %v)", got, ref.Greedy[:step+1], ref.Margins[:step+1])
					}
					if logits, err = m.Forward(context.Background(), []int32{next}, caches, false); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
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
