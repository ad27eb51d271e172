package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

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

// BenchmarkStoredScales times a decode-shaped product (DotRowsStored over a 131072×896
// matrix, more than the caches hold) and the prefill's row dequantization with bf16 scales
// and biases read in place ("now"), against float32 copies of them ("before"; 8-bit
// dequantization on that side through the plain Go kernel, as without the assembly),
// alternating the two in each iteration; it reports the median time of each and their
// ratio (now/before: below 1 is faster):
//
//	go test -run '^$' -bench StoredScales -benchtime 20x ./internal/quant/
func BenchmarkStoredScales(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 5))
	const rows, cols, group = 131072, 896, 64
	for _, bits := range []int{4, 8} {
		b.Run(fmt.Sprintf("%dbit", bits), func(b *testing.B) {
			packed := make([]uint32, rows*Words(cols, bits))
			for i := range packed {
				packed[i] = r.Uint32()
			}
			s32, b32 := randMatrix(r, rows*cols/group), randMatrix(r, rows*cols/group)
			s, bi, _, _ := storedScales(ScaleBF16, s32, b32)
			x := randMatrix(r, cols)
			var v Vec
			v.Prepare(x, bits, group)
			out := make([]float32, rows)
			row := make([]float32, cols)
			dot := func(s, b Scales) { v.DotRowsStored(out, packed, s, b) }
			deq := func(s, b Scales) {
				if bits == 8 && s.Type == ScaleF32 {
					// The float32 side of 8-bit rows: the plain Go kernel.
					prev := SetSIMD(false)
					defer SetSIMD(prev)
				}
				wpr, gpr := Words(cols, bits), cols/group
				for i := 0; i < rows; i += 8 { // every 8th row: the dequantization, not the reads
					DequantizeRowStored(row, packed[i*wpr:(i+1)*wpr], s.Slice(i*gpr, (i+1)*gpr), b.Slice(i*gpr, (i+1)*gpr), bits, group)
				}
			}
			for _, k := range []struct {
				name string
				fn   func(s, b Scales)
			}{{"dot", dot}, {"dequant", deq}} {
				b.Run(k.name, func(b *testing.B) { benchScales(b, k.name, k.fn, s32, b32, s, bi) })
			}
		})
	}
}

func benchScales(b *testing.B, name string, fn func(s, b Scales), s32, b32 []float32, s, bi Scales) {
	var old, cur []float64
	for b.Loop() {
		t0 := time.Now()
		fn(F32Scales(s32), F32Scales(b32))
		t1 := time.Now()
		fn(s, bi)
		old, cur = append(old, t1.Sub(t0).Seconds()), append(cur, time.Since(t1).Seconds())
	}
	mo, mc := median(old), median(cur)
	b.ReportMetric(mo*1e6, "before-µs")
	b.ReportMetric(mc*1e6, "now-µs")
	b.ReportMetric(mc/mo, "now/before")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
