package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDecodeKernels checks DotRowsStored, with the SIMD kernels where the CPU has them and
// with the plain Go kernels, against a float64 product with the plainly dequantized rows,
// on random weights and inputs (never zeros): every bit width, group size and scale type,
// odd numbers of rows, row lengths of one chunk, an odd number of chunks and rows the 4-bit
// kernel leaves to the plain code (a multiple of 32 but not of 64). It also checks that a
// row's result does not depend on how many rows the call covered (see DotRowsStored).
func TestDecodeKernels(t *testing.T) {
	for _, k := range []struct{ simd, avx512 bool }{{true, true}, {true, false}, {false, false}} {
		prevSIMD := SetSIMD(k.simd)
		prev512 := SetAVX512(k.avx512)
		t.Run(decodeKernel(), testDecodeKernels)
		SetAVX512(prev512)
		SetSIMD(prevSIMD)
	}
}

func testDecodeKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 7))
	for _, st := range []ScaleType{ScaleF32, ScaleBF16, ScaleF16} {
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, group := range []int{32, 64, 128} {
				for _, cols := range []int{128, 384, 448, 896, 1152, 96, 160, 32, 64, 192} {
					if cols%group != 0 {
						continue
					}
					for _, rows := range []int{1, 3, 13} {
						checkDecode(t, r, st, bits, group, rows, cols)
					}
				}
			}
		}
	}
}

func checkDecode(t *testing.T, r *rand.Rand, st ScaleType, bits, group, rows, cols int) {
	t.Helper()
	w := randMatrix(r, rows*cols)
	x := randMatrix(r, cols)
	for i := range x {
		x[i] += 0.01 // no zeros, and a nonzero mean so the bias term matters
	}
	p, s32, b32, _ := Quantize(w, rows, cols, bits, group)
	s, b, sv, bv := storedScales(st, s32, b32)
	d, _ := Dequantize(p, sv, bv, rows, cols, bits, group)
	var v Vec
	if err := v.Prepare(x, bits, group); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, rows)
	v.DotRowsStored(got, p, s, b)
	wpr, gpr := Words(cols, bits), cols/group
	for i := 0; i < rows; i++ {
		var want, mag float64
		for j := 0; j < cols; j++ {
			want += float64(x[j]) * float64(d[i*cols+j])
			mag += math.Abs(float64(x[j]) * float64(d[i*cols+j]))
		}
		if math.Abs(float64(got[i])-want) > 1e-6*mag+1e-7 {
			t.Fatalf("%v scales, %d bits, group %d, %d×%d: row %d = %v, reference %v (Σ|terms| %v)", st, bits, group, rows, cols, i, got[i], want, mag)
		}
		// The same row alone, and as the last row of a call starting one row earlier.
		var one [1]float32
		v.DotRowsStored(one[:], p[i*wpr:(i+1)*wpr], s.Slice(i*gpr, (i+1)*gpr), b.Slice(i*gpr, (i+1)*gpr))
		if math.Float32bits(one[0]) != math.Float32bits(got[i]) {
			t.Fatalf("%v scales, %d bits, group %d, %d×%d: row %d alone = %v, in the call over %d rows %v", st, bits, group, rows, cols, i, one[0], rows, got[i])
		}
		if i > 0 {
			var two [2]float32
			v.DotRowsStored(two[:], p[(i-1)*wpr:(i+1)*wpr], s.Slice((i-1)*gpr, (i+1)*gpr), b.Slice((i-1)*gpr, (i+1)*gpr))
			if math.Float32bits(two[1]) != math.Float32bits(got[i]) || math.Float32bits(two[0]) != math.Float32bits(got[i-1]) {
				t.Fatalf("%v scales, %d bits, group %d: rows %d,%d in a call of two = %v, in the call over %d rows %v", st, bits, group, i-1, i, two, rows, got[i-1:i+1])
			}
		}
	}
}
