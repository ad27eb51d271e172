package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxg/mlxg/internal/crew"
)

// TestVecDot checks Vec.Dot (the AVX2 kernels for 4 and 8 bits where the CPU has them,
// DotRow otherwise) against a float64 dot product with the dequantized rows.
func TestVecDot(t *testing.T) {
	for _, on := range []bool{true, false} {
		prev := SetSIMD(on)
		t.Logf("SIMD kernels: %v", simd)
		testVecDot(t)
		SetSIMD(prev)
	}
}

func testVecDot(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, group := range []int{32, 64, 128} {
			const rows, cols = 7, 384
			w := randMatrix(r, rows*cols)
			x := randMatrix(r, cols)
			p, s, b, _ := Quantize(w, rows, cols, bits, group)
			d, _ := Dequantize(p, s, b, rows, cols, bits, group)
			var v Vec
			if err := v.Prepare(x, bits, group); err != nil {
				t.Fatal(err)
			}
			wpr, gpr := Words(cols, bits), cols/group
			all := make([]float32, rows)
			v.DotRows(all, p, s, b)
			for row := 0; row < rows; row++ {
				var want float64
				for i := 0; i < cols; i++ {
					want += float64(x[i]) * float64(d[row*cols+i])
				}
				got := v.Dot(p[row*wpr:(row+1)*wpr], s[row*gpr:(row+1)*gpr], b[row*gpr:(row+1)*gpr])
				if math.Abs(float64(got)-want) > 1e-5+1e-4*math.Abs(want) || math.Abs(float64(all[row])-want) > 1e-5+1e-4*math.Abs(want) {
					t.Fatalf("bits %d group %d row %d: Dot %v, DotRows %v, reference %v", bits, group, row, got, all[row], want)
				}
			}
		}
	}
	var v Vec
	if err := v.Prepare(make([]float32, 100), 4, 64); err == nil {
		t.Fatal("a vector of 100 values prepared for groups of 64")
	}
}

func BenchmarkDotQ4(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const cols = 4096
	w, x := randMatrix(r, cols), randMatrix(r, cols)
	p, s, bi, _ := Quantize(w, 1, cols, 4, 64)
	var v Vec
	v.Prepare(x, 4, 64)
	xs := make([]float32, cols/64)
	GroupSums(xs, x, 64)
	b.Run("Vec", func(b *testing.B) {
		for b.Loop() {
			v.Dot(p, s, bi)
		}
	})
	b.Run("DotRow", func(b *testing.B) {
		for b.Loop() {
			DotRow(x, xs, p, s, bi, 4, 64)
		}
	})
}

// BenchmarkDecodeDRAM is the decode product's rate from memory: Qwen2-0.5B's MLP up
// matrix (4864x896, bf16 scales, groups of 64) in 48 copies (over 100 MB, larger than the
// caches), each pass computing every copy against one vector on 1 or 2 threads (the
// shared crew). Compare GB/s with scripts/bench's bandwidth reading; the machine is shared,
// so quote medians of several runs.
//
//	go test -run '^$' -bench DecodeDRAM -count 5 ./internal/quant/
func BenchmarkDecodeDRAM(b *testing.B) {
	const rows, cols, copies = 4864, 896, 48
	for _, bits := range []int{4, 8} {
		r := rand.New(rand.NewPCG(1, 1))
		p, s, bi, _ := Quantize(randMatrix(r, rows*cols), rows, cols, bits, 64)
		ss, bs, _, _ := storedScales(ScaleBF16, s, bi)
		sb, bb := ss.Bits, bs.Bits
		type matrix struct {
			p    []uint32
			s, b []uint16
		}
		ms := make([]matrix, copies)
		for i := range ms {
			ms[i] = matrix{append([]uint32(nil), p...), append([]uint16(nil), sb...), append([]uint16(nil), bb...)}
		}
		x := randMatrix(r, cols)
		var v Vec
		v.Prepare(x, bits, 64)
		var v8 Vec8
		v8.Prepare(x, bits, 64)
		out := make([]float32, rows)
		wpr, gpr := Words(cols, bits), cols/64
		for _, run := range []struct {
			name    string
			threads int
			int8    bool
		}{{"", 1, false}, {"", 2, false}, {"int8/", 1, true}, {"int8/", 2, true}} {
			if run.int8 && !Int8Supported(bits, 64) {
				continue
			}
			threads := run.threads
			b.Run(fmt.Sprintf("%sq%d/threads-%d", run.name, bits, threads), func(b *testing.B) {
				for b.Loop() {
					for _, m := range ms {
						crew.Run(rows, 8*threads, threads-1, func(lo, hi int) {
							s, bi := HalfScales(m.s[lo*gpr:hi*gpr], ScaleBF16), HalfScales(m.b[lo*gpr:hi*gpr], ScaleBF16)
							if run.int8 {
								v8.DotRowsStored(out[lo:hi], 0, m.p[lo*wpr:hi*wpr], s, bi)
							} else {
								v.DotRowsStored(out[lo:hi], m.p[lo*wpr:hi*wpr], s, bi)
							}
						})
					}
				}
				codes := float64(b.N) * copies * rows * cols
				b.ReportMetric(codes/b.Elapsed().Seconds()/1e9, "Gcodes/s")
				b.ReportMetric(codes*(float64(bits)/8+4.0/64)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// BenchmarkDecodeCache is one thread's product with a 512×896 matrix that stays in cache
// (bf16 scales, group 64): the kernels' arithmetic rate, float inputs (Vec) against 8-bit
// ones (Vec8).
func BenchmarkDecodeCache(b *testing.B) {
	const rows, cols = 512, 896
	for _, bits := range []int{4, 8} {
		r := rand.New(rand.NewPCG(1, 1))
		p, s, bi, _ := Quantize(randMatrix(r, rows*cols), rows, cols, bits, 64)
		ss, bs, _, _ := storedScales(ScaleBF16, s, bi)
		x := randMatrix(r, cols)
		var v Vec
		v.Prepare(x, bits, 64)
		var v8 Vec8
		v8.Prepare(x, bits, 64)
		out := make([]float32, rows)
		// run reports codes multiplied per call (rows·cols per vector), per second of wall time
		// and of this thread's CPU time (steadier than wall time on a shared machine).
		run := func(b *testing.B, vectors int, f func()) {
			cpu0 := threadCPU()
			for b.Loop() {
				f()
			}
			codes := float64(b.N) * float64(vectors) * rows * cols
			b.ReportMetric(codes/b.Elapsed().Seconds()/1e9, "Gcodes/s")
			b.ReportMetric(codes/(threadCPU()-cpu0)/1e9, "Gcodes/cpu-s")
		}
		b.Run(fmt.Sprintf("float/q%d", bits), func(b *testing.B) { run(b, 1, func() { v.DotRowsStored(out, p, ss, bs) }) })
		if !Int8Supported(bits, 64) {
			continue
		}
		b.Run(fmt.Sprintf("int8/q%d", bits), func(b *testing.B) { run(b, 1, func() { v8.DotRowsStored(out, 0, p, ss, bs) }) })
		// Int8Vectors vectors per pass over the rows.
		var vn Vec8
		vn.PrepareN(randMatrix(r, Int8Vectors*cols), Int8Vectors, bits, 64)
		outN := make([]float32, Int8Vectors*rows)
		b.Run(fmt.Sprintf("int8x%d/q%d", Int8Vectors, bits), func(b *testing.B) {
			run(b, Int8Vectors, func() { vn.DotRowsStored(outN, rows, p, ss, bs) })
		})
	}
}
