package quant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxg/mlxg/internal/half"
)

// storedScales returns scales and biases in ScaleType st, and the float32 values they hold
// (the inputs rounded to bf16 or fp16), for the plain reference.
func storedScales(st ScaleType, s, b []float32) (Scales, Scales, []float32, []float32) {
	if st == ScaleF32 {
		return F32Scales(s), F32Scales(b), s, b
	}
	conv := func(v []float32) ([]uint16, []float32) {
		bits, vals := make([]uint16, len(v)), make([]float32, len(v))
		for i, x := range v {
			if st == ScaleBF16 {
				bits[i] = half.F32ToBF16(x)
				vals[i] = half.BF16ToF32(bits[i])
			} else {
				bits[i] = half.F32ToF16(x)
				vals[i] = half.F16ToF32(bits[i])
			}
		}
		return bits, vals
	}
	sb, sv := conv(s)
	bb, bv := conv(b)
	return HalfScales(sb, st), HalfScales(bb, st), sv, bv
}

// TestStoredScales checks DotRowsStored and DequantizeRowStored, for scales and biases
// stored as float32, bf16 and fp16 (read in place), with the assembly kernels (4 and 8 bits
// on amd64) and without, against a float64 reference on the dequantized rows, on random
// weights and inputs.
func TestStoredScales(t *testing.T) {
	for _, on := range []bool{true, false} {
		prev := SetSIMD(on)
		t.Logf("SIMD kernels: %v", simd)
		testStoredScales(t)
		SetSIMD(prev)
	}
}

func testStoredScales(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 21))
	for _, st := range []ScaleType{ScaleF32, ScaleBF16, ScaleF16} {
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, group := range []int{32, 64, 128} {
				const rows, cols = 9, 640
				w := randMatrix(r, rows*cols)
				x := randMatrix(r, cols)
				p, s32, b32, _ := Quantize(w, rows, cols, bits, group)
				s, b, sv, bv := storedScales(st, s32, b32)
				d, _ := Dequantize(p, sv, bv, rows, cols, bits, group) // the plain reference
				var v Vec
				if err := v.Prepare(x, bits, group); err != nil {
					t.Fatal(err)
				}
				wpr, gpr := Words(cols, bits), cols/group
				got := make([]float32, rows)
				v.DotRowsStored(got, p, s, b)
				row := make([]float32, cols)
				for i := 0; i < rows; i++ {
					var want float64
					for j := 0; j < cols; j++ {
						want += float64(x[j]) * float64(d[i*cols+j])
					}
					if math.Abs(float64(got[i])-want) > 1e-5+1e-4*math.Abs(want) {
						t.Fatalf("%v scales, bits %d group %d row %d: DotRowsStored %v, reference %v", st, bits, group, i, got[i], want)
					}
					DequantizeRowStored(row, p[i*wpr:(i+1)*wpr], s.Slice(i*gpr, (i+1)*gpr), b.Slice(i*gpr, (i+1)*gpr), bits, group)
					for j, g := range row {
						k := j / group // an ulp or two of the terms (FMA rounds once)
						tol := 2.4e-7 * (255*math.Abs(float64(sv[i*gpr+k])) + math.Abs(float64(bv[i*gpr+k])))
						if math.Abs(float64(g-d[i*cols+j])) > tol {
							t.Fatalf("%v scales, bits %d group %d: element %d,%d = %v, reference %v", st, bits, group, i, j, g, d[i*cols+j])
						}
					}
				}
			}
		}
	}
}

func (st ScaleType) String() string {
	return [...]string{"float32", "bf16", "fp16"}[st]
}
