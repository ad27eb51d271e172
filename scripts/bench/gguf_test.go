package main

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxg/mlxg/internal/half"
	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/registry/safetensors"
)

// TestQ41OfMLX: MLX 4-bit rows (bf16 scales and biases, groups of 64) rewritten as Q4_1
// blocks dequantize, by Q4_1's own rule (d·q + m), to MLX's values.
func TestQ41OfMLX(t *testing.T) {
	const rows, cols, group = 5, 256, 64
	r := rand.New(rand.NewPCG(1, 2))
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(r.NormFloat64() * 0.02)
	}
	packed, s, b, err := quant.Quantize(w, rows, cols, 4, group)
	if err != nil {
		t.Fatal(err)
	}
	bf := func(v []float32) *safetensors.Tensor {
		d := make([]byte, 2*len(v))
		for i, x := range v {
			v[i] = half.BF16ToF32(half.F32ToBF16(x)) // the checkpoint's bf16 values
			binary.LittleEndian.PutUint16(d[2*i:], half.F32ToBF16(x))
		}
		return &safetensors.Tensor{TensorInfo: safetensors.TensorInfo{DType: safetensors.BF16, Shape: []int{rows, cols / group}}, Data: d}
	}
	st, bt := bf(s), bf(b)
	codes := make([]byte, 4*len(packed))
	for i, p := range packed {
		binary.LittleEndian.PutUint32(codes[4*i:], p)
	}
	wt := &safetensors.Tensor{TensorInfo: safetensors.TensorInfo{DType: safetensors.U32, Shape: []int{rows, cols / 8}}, Data: codes}
	q41, err := q4ToQ41(wt, st, bt, rows, cols, group)
	if err != nil {
		t.Fatal(err)
	}
	want, err := quant.Dequantize(packed, s, b, rows, cols, 4, group)
	if err != nil {
		t.Fatal(err)
	}
	for blk := range rows * cols / 32 {
		o := q41[blk*20:]
		d := half.F16ToF32(binary.LittleEndian.Uint16(o))
		m := half.F16ToF32(binary.LittleEndian.Uint16(o[2:]))
		for j := range 32 {
			q := o[4+j%16] & 15
			if j >= 16 {
				q = o[4+j%16] >> 4
			}
			got, exp := d*float32(q)+m, want[blk*32+j]
			if math.Abs(float64(got-exp)) > 1e-6*math.Abs(float64(exp))+1e-9 {
				t.Fatalf("block %d element %d: Q4_1 %g, MLX %g", blk, j, got, exp)
			}
		}
	}
}
