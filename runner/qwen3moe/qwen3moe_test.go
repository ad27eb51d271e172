package qwen3moe_test

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
)

// TestConvertAndChunks: the Hugging Face layout is refused with a pointer to
// `mlxg create`; the converted checkpoint (float, and 4-bit with the 8-bit router
// override mlx-lm writes) gives the same logits in chunks as in one pass.
func TestConvertAndChunks(t *testing.T) {
	dir := t.TempDir()
	hf := filepath.Join(dir, "hf")
	if err := randmodel.Generate(hf, randmodel.TinyMoE(256), randmodel.Options{Seed: 9}); err != nil {
		t.Fatal(err)
	}
	if _, err := model.Load(hf, cpu.New(2)); err == nil {
		t.Fatal("the per-expert layout loaded; want an error")
	}
	r := rand.New(rand.NewPCG(1, 2))
	p := make([]int32, 19)
	for i := range p {
		p[i] = int32(r.IntN(256))
	}
	for _, bits := range []int{0, 4} {
		out := filepath.Join(dir, "mlx", string(rune('0'+bits)))
		if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: bits, GroupSize: 32}); err != nil {
			t.Fatal(err)
		}
		if bits > 0 {
			raw, _ := os.ReadFile(filepath.Join(out, "config.json"))
			var cfg struct {
				Quantization map[string]any `json:"quantization"`
			}
			json.Unmarshal(raw, &cfg)
			if o, ok := cfg.Quantization["model.layers.0.mlp.gate"].(map[string]any); !ok || o["bits"] != 8.0 {
				t.Fatalf("quantization block %v has no 8-bit router override", cfg.Quantization)
			}
		}
		m, err := model.Load(out, cpu.New(2))
		if err != nil {
			t.Fatal(err)
		}
		var logits [2][]float32
		for i, chunk := range []int{len(p), 4} {
			caches, _ := m.NewCaches(true)
			for s := 0; s < len(p); s += chunk {
				if logits[i], err = m.Forward(context.Background(), p[s:min(s+chunk, len(p))], caches, false); err != nil {
					t.Fatal(err)
				}
			}
		}
		var num, den float64
		for i := range logits[0] {
			num = max(num, math.Abs(float64(logits[0][i]-logits[1][i])))
			den = max(den, math.Abs(float64(logits[0][i])))
		}
		if num/den > 1e-5 {
			t.Errorf("bits %d: chunked logits differ by %.3g", bits, num/den)
		}
		m.Close()
	}
}
