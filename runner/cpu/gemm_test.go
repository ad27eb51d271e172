package cpu

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/runner/compute"
)

// TestDot4x3: the assembly kernel against the plain one on random rows, strides that are
// not the row length, lengths of one to many vectors.
func TestDot4x3(t *testing.T) {
	if !gemmSIMD {
		t.Skip("no assembly kernel on this CPU")
	}
	r := rand.New(rand.NewPCG(51, 51))
	for _, n := range []int{8, 16, 24, 200, 1024} {
		xs, ws := n+13, n+5
		x, w := randVec(r, 4*xs), randVec(r, 3*ws)
		var got, want [12]float32
		dot4x3(&x[0], xs, &w[0], ws, n, &got)
		dot4x3Ref(&want, x, xs, w, ws, n)
		for i := range want {
			if d := got[i] - want[i]; d > 1e-4*(1+abs(want[i])) || -d > 1e-4*(1+abs(want[i])) {
				t.Fatalf("n=%d: out[%d] = %v, plain kernel %v", n, i, got[i], want[i])
			}
		}
	}
}

// cpuSeconds is the process's user and system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func abs(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// TestGemmBlocked: the blocked product, with the assembly and the plain kernel, against a
// float64 product, for float and 4- and 8-bit weights, token counts with every remainder
// mod 4, row counts with every remainder mod 3 and the tile size, rows longer than a
// column block (and than 2048: 12-row tiles), lengths that are not multiples of 8, 1 and
// 3 threads; and every row equal to the same row computed alone (4 copies of it).
func TestGemmBlocked(t *testing.T) {
	r := rand.New(rand.NewPCG(52, 52))
	prevB, prevS := blocked, gemmSIMD
	defer func() { blocked, gemmSIMD = prevB, prevS }()
	blocked = true
	type shape struct{ out, in, bits int }
	for _, sh := range []shape{{37, 100, 0}, {25, 5, 0}, {49, 1036, 0}, {26, 2112, 4}, {50, 192, 8}, {13, 2176, 8}, {48, 64, 4}} {
		wv := randVec(r, sh.out*sh.in)
		w := &weight{name: "t", out: sh.out, in: sh.in, f: wv}
		ref := wv
		if sh.bits > 0 {
			packed, scales, biases, err := quant.Quantize(wv, sh.out, sh.in, sh.bits, 64)
			if err != nil {
				t.Fatal(err)
			}
			w = &weight{name: "t", out: sh.out, in: sh.in, q: compute.Quant{Mode: quant.Affine, Bits: sh.bits, GroupSize: 64},
				packed: packed, scales: quant.F32Scales(scales), biases: quant.F32Scales(biases)}
			ref, _ = quant.Dequantize(packed, scales, biases, sh.out, sh.in, sh.bits, 64)
		}
		for _, simd := range []bool{true, false} {
			gemmSIMD = simd && prevS
			for _, threads := range []int{1, 3} {
				b := New(threads)
				for _, T := range []int{4, 5, 6, 7, 13} {
					x := randVec(r, T*sh.in)
					y := make([]float32, T*sh.out)
					b.gemm(y, x, T, w)
					closeTo(t, "blocked gemm", y, refLinear(x, ref, nil, T, sh.out, sh.in), 1e-4)
					// Row 2 alone, as four copies of it: the same bits.
					x4 := make([]float32, 4*sh.in)
					for i := range 4 {
						copy(x4[i*sh.in:], x[2*sh.in:3*sh.in])
					}
					y4 := make([]float32, 4*sh.out)
					b.gemm(y4, x4, 4, w)
					for o := range sh.out {
						if y4[o] != y[2*sh.out+o] {
							t.Fatalf("%v T=%d: row 2 column %d is %v in the product, %v alone", sh, T, o, y[2*sh.out+o], y4[o])
						}
					}
				}
			}
		}
	}
}

// BenchmarkGemm: 4- and 8-bit prefill products of Qwen2-0.5B's shapes (MLP up and down,
// attention output) at 128 and 512 tokens on 2 threads, the blocked path against the
// two-token one, alternated in one run:
//
//	go test -run '^$' -bench Gemm -count 5 ./runner/cpu/
func BenchmarkGemm(b *testing.B) {
	r := rand.New(rand.NewPCG(53, 53))
	prev := blocked
	defer func() { blocked = prev }()
	for _, sh := range []struct{ out, in int }{{4864, 896}, {896, 4864}, {896, 896}} {
		for _, bits := range []int{4, 8} {
			packed, scales, biases, _ := quant.Quantize(randVec(r, sh.out*sh.in), sh.out, sh.in, bits, 64)
			w := &weight{name: "bench", out: sh.out, in: sh.in, q: compute.Quant{Mode: quant.Affine, Bits: bits, GroupSize: 64},
				packed: packed, scales: quant.F32Scales(scales), biases: quant.F32Scales(biases)}
			for _, T := range []int{128, 512} {
				x, y := randVec(r, T*sh.in), make([]float32, T*sh.out)
				be := New(2)
				for _, on := range []bool{false, true} {
					name := map[bool]string{false: "twotoken", true: "blocked"}[on]
					b.Run(fmt.Sprintf("%dx%d/q%d/T%d/%s", sh.out, sh.in, bits, T, name), func(b *testing.B) {
						blocked = on && prev
						c0 := cpuSeconds()
						for b.Loop() {
							be.linear(y, x, T, w)
						}
						flops := float64(T*sh.out*sh.in) * 2 * float64(b.N)
						b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOPS")
						// On a shared machine the wall clock also counts time spent waiting for a core.
						b.ReportMetric(flops/(cpuSeconds()-c0)/1e9, "GFLOP/cpu-s")
					})
				}
			}
		}
	}
}

// TestDot4x3To: the kernel that writes its sums into the output equals dot4x3's sums
// written (or added) by hand, bit for bit, and leaves the neighbours alone.
func TestDot4x3To(t *testing.T) {
	if !gemmSIMD {
		t.Skip("no assembly kernel on this CPU")
	}
	r := rand.New(rand.NewPCG(54, 54))
	for _, n := range []int{8, 64, 1024} {
		for _, acc := range []bool{false, true} {
			x, w := randVec(r, 4*(n+3)), randVec(r, 3*(n+1))
			const ldc = 7
			c := randVec(r, 4*ldc)
			want := append([]float32(nil), c...)
			var s [12]float32
			dot4x3(&x[0], n+3, &w[0], n+1, n, &s)
			for tk := 0; tk < 4; tk++ {
				for j := 0; j < 3; j++ {
					if acc {
						want[tk*ldc+1+j] += s[3*tk+j]
					} else {
						want[tk*ldc+1+j] = s[3*tk+j]
					}
				}
			}
			dot4x3To(&x[0], n+3, &w[0], n+1, n, &c[1], ldc, acc)
			for i := range want {
				if c[i] != want[i] {
					t.Fatalf("n=%d acc=%v: c[%d] = %v, want %v", n, acc, i, c[i], want[i])
				}
			}
		}
	}
}
