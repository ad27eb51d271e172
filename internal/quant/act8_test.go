package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestVec8 checks Vec8's products, with the AVX2 kernel where the CPU has it and in plain Go,
// on random weights and inputs: against the float64 product of the 8-bit inputs with the
// integer codes (act8Reference, exact up to float32 rounding), against the float product of
// the unrounded inputs within the bound rounding x to 8 bits allows (Σ |w|·d/2), and a row
// alone against the same row inside a larger call (bit-identical). Row lengths cover whole
// blocks of 8 groups and the groups left over after them.
func TestVec8(t *testing.T) {
	for _, on := range []bool{true, false} {
		prev := SetSIMD(on)
		name := "go"
		if int8Kernel() {
			name = "asm"
		}
		t.Run(name, testVec8)
		SetSIMD(prev)
	}
}

func testVec8(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	for _, st := range []ScaleType{ScaleF32, ScaleBF16, ScaleF16} {
		for _, bits := range []int{4, 8} {
			for _, group := range []int{32, 64, 128} {
				if !Int8Supported(bits, group) {
					continue
				}
				for _, cols := range []int{128, 384, 448, 896, 1152, 2048, 4864} {
					if cols%group != 0 {
						continue
					}
					for _, rows := range []int{1, 3, 13} {
						checkVec8(t, r, st, bits, group, rows, cols)
					}
				}
			}
		}
	}
}

func checkVec8(t *testing.T, r *rand.Rand, st ScaleType, bits, group, rows, cols int) {
	t.Helper()
	w := randMatrix(r, rows*cols)
	x := randMatrix(r, cols)
	for i := range x {
		x[i] += 0.01 // a nonzero mean, so the bias term matters
		if i%97 == 5 {
			x[i] *= 20 // an outlier channel, as activations have
		}
	}
	p, s32, b32, _ := Quantize(w, rows, cols, bits, group)
	s, b, sv, bv := storedScales(st, s32, b32)
	deq, _ := Dequantize(p, sv, bv, rows, cols, bits, group)
	var v Vec8
	if err := v.Prepare(x, bits, group); err != nil {
		t.Fatal(err)
	}
	c, d := v.natural()
	for j, f := range x {
		if e := math.Abs(float64(f) - float64(d[j/group])*float64(c[j])); e > float64(d[j/group])*0.5001 {
			t.Fatalf("x[%d] = %v quantized to %d·%v", j, f, c[j], d[j/group])
		}
	}
	got := make([]float32, rows)
	v.DotRowsStored(got, p, s, b)
	what := func() string { return fmt.Sprintf("%v scales, %d bits, group %d, %d×%d", st, bits, group, rows, cols) }
	wpr, gpr := Words(cols, bits), cols/group
	for i := 0; i < rows; i++ {
		row := p[i*wpr : (i+1)*wpr]
		want, mag := act8Reference(c, d, row, s.Slice(i*gpr, (i+1)*gpr), b.Slice(i*gpr, (i+1)*gpr), bits, group)
		if math.Abs(float64(got[i])-want) > 2e-6*mag+1e-7 {
			t.Fatalf("%s: row %d = %v, integer reference %v (Σ|terms| %v)", what(), i, got[i], want, mag)
		}
		var exact, bound float64
		for j := 0; j < cols; j++ {
			wj := float64(deq[i*cols+j])
			exact += float64(x[j]) * wj
			bound += math.Abs(wj) * float64(d[j/group]) * 0.5
		}
		if math.Abs(float64(got[i])-exact) > bound+1e-5*mag {
			t.Fatalf("%s: row %d = %v, float product %v: off by more than 8-bit inputs allow (%v)", what(), i, got[i], exact, bound)
		}
		var one [1]float32
		v.DotRowsStored(one[:], row, s.Slice(i*gpr, (i+1)*gpr), b.Slice(i*gpr, (i+1)*gpr))
		if math.Float32bits(one[0]) != math.Float32bits(got[i]) {
			t.Fatalf("%s: row %d alone = %v, in the call over %d rows %v", what(), i, one[0], rows, got[i])
		}
	}
}

// natural returns v's codes in the order of x and each group's d.
func (v *Vec8) natural() ([]int8, []float32) {
	c := make([]int8, v.n)
	for g := 0; g < v.n/v.group; g++ {
		src, dst := v.codes[g*v.group:(g+1)*v.group], c[g*v.group:(g+1)*v.group]
		if v.bits != 4 {
			copy(dst, src)
			continue
		}
		for k := 0; k < v.group; k += 64 {
			for b := 0; b < 32; b++ {
				dst[k+2*b], dst[k+2*b+1] = src[k+b], src[k+32+b]
			}
		}
	}
	d := make([]float32, v.n/v.group)
	for g := range d {
		d[g] = v.dc[dcIndex(g)]
	}
	return c, d
}

// TestVec8Errors checks that unsupported shapes are refused with an error.
func TestVec8Errors(t *testing.T) {
	var v Vec8
	for _, c := range []struct{ n, bits, group int }{{64, 4, 32}, {64, 3, 64}, {96, 4, 64}, {0, 8, 32}} {
		if err := v.Prepare(make([]float32, c.n), c.bits, c.group); err == nil {
			t.Errorf("Prepare(%d values, %d bits, group %d) succeeded", c.n, c.bits, c.group)
		}
	}
}
