package glm4moe_test

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// rewrite copies the MLX checkpoint src to a new folder with its per-head stacks
// (embed_q, unembed_out) replaced by what add writes for each layer.
func rewrite(t *testing.T, src string, add func(layer int) []safetensors.Tensor) string {
	t.Helper()
	dst := t.TempDir()
	for _, f := range []string{"config.json", "generation_config.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ck, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var ts []safetensors.Tensor
	for _, n := range ck.Names() {
		if strings.Contains(n, ".embed_q.") || strings.Contains(n, ".unembed_out.") {
			continue
		}
		tn, _ := ck.Tensor(n)
		ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: n, DType: tn.DType, Shape: tn.Shape}, Data: append([]byte(nil), tn.Data...)})
	}
	for l := 0; l < 3; l++ {
		ts = append(ts, add(l)...)
	}
	if err := safetensors.Write(filepath.Join(dst, "model.safetensors"), ts, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	return dst
}

func f32(name string, shape []int, v []float32) safetensors.Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: safetensors.F32, Shape: shape}, Data: b}
}

// quantized is v (rows × cols) as MLX affine codes, scales and biases under prefix.
func quantized(t *testing.T, prefix string, lead []int, v []float32, rows, cols, bits, group int) []safetensors.Tensor {
	t.Helper()
	packed, scales, biases, err := quant.Quantize(v, rows, cols, bits, group)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4*len(packed))
	for i, x := range packed {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	gs := append(append([]int(nil), lead...), cols/group)
	return []safetensors.Tensor{
		{TensorInfo: safetensors.TensorInfo{Name: prefix + ".weight", DType: safetensors.U32, Shape: append(append([]int(nil), lead...), quant.Words(cols, bits))}, Data: b},
		f32(prefix+".scales", gs, scales), f32(prefix+".biases", gs, biases),
	}
}

// TestKVBSplitAtLoad: a checkpoint that stores kv_b_proj whole (mlx-lm's first
// glm4_moe_lite conversions) loads with it split per head at load: in float, bit for bit
// what `mlxg create`'s split gives; 4-bit, bit for bit what dequantizing, splitting and
// quantizing again (mlx-lm's sanitize) gives. (Quantized twice, its weights are not
// create's, and a tiny random model's grouped router makes any difference large.)
func TestKVBSplitAtLoad(t *testing.T) {
	cfg := randmodel.TinyGlm4MoeLite(256)
	H, nope, vd, rank := cfg.NumHeads, cfg.QKNopeHeadDim, cfg.VHeadDim, cfg.KVLoraRank
	rows := H * (nope + vd)
	hf, _ := tiny(t, "glm4_moe_lite", 0)
	src, err := safetensors.OpenDir(hf)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	kvb := func(l int) []float32 {
		tn, _ := src.Tensor("model.layers." + itoa(l) + ".self_attn.kv_b_proj.weight")
		v, err := tn.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	logits := func(dir string) []float32 {
		m, err := model.Load(dir, cpu.New(2))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		caches, _ := m.NewCaches(true)
		return modeltest.Forward(t, m, caches, modeltest.Tokens(4, 20), 6)
	}
	same := func(what string, got, want []float32) {
		t.Helper()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: logit %d is %v, want %v", what, i, got[i], want[i])
			}
		}
	}
	p := func(l int) string { return "model.layers." + itoa(l) + ".self_attn." }

	f32dir := filepath.Join(t.TempDir(), "f32")
	convertTo(t, hf, f32dir, 0)
	whole := rewrite(t, f32dir, func(l int) []safetensors.Tensor {
		return []safetensors.Tensor{f32(p(l)+"kv_b_proj.weight", []int{rows, rank}, kvb(l))}
	})
	same("float kv_b_proj split at load", logits(whole), logits(f32dir))

	q4dir := filepath.Join(t.TempDir(), "q4")
	convertTo(t, hf, q4dir, 4)
	wholeQ4 := rewrite(t, q4dir, func(l int) []safetensors.Tensor {
		return quantized(t, p(l)+"kv_b_proj", []int{rows}, kvb(l), rows, rank, 4, 32)
	})
	sanitized := rewrite(t, q4dir, func(l int) []safetensors.Tensor {
		packed, scales, biases, err := quant.Quantize(kvb(l), rows, rank, 4, 32)
		if err != nil {
			t.Fatal(err)
		}
		w, err := quant.Dequantize(packed, scales, biases, rows, rank, 4, 32)
		if err != nil {
			t.Fatal(err)
		}
		k, v := make([]float32, H*rank*nope), make([]float32, H*vd*rank)
		for h := 0; h < H; h++ {
			for d := 0; d < nope; d++ {
				for x := 0; x < rank; x++ {
					k[(h*rank+x)*nope+d] = w[(h*(nope+vd)+d)*rank+x]
				}
			}
			for d := 0; d < vd; d++ {
				copy(v[(h*vd+d)*rank:(h*vd+d+1)*rank], w[(h*(nope+vd)+nope+d)*rank:])
			}
		}
		return append(quantized(t, p(l)+"embed_q", []int{H, rank}, k, H*rank, nope, 4, 32),
			quantized(t, p(l)+"unembed_out", []int{H, vd}, v, H*vd, rank, 4, 32)...)
	})
	same("4-bit kv_b_proj split at load", logits(wholeQ4), logits(sanitized))
}
