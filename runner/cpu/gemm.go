package cpu

import (
	"sync/atomic"

	"github.com/mlxg/mlxg/internal/crew"
)

// The blocked prefill product (T >= 4 rows). Each worker claims a tile of weight rows
// (dequantized once into a buffer of its own when quantized), then walks the tokens four
// at a time and the tile's rows three at a time with the 4×3 kernel: twelve running sums
// in registers, seven vector loads per twelve multiply-adds, where the two-token kernel
// needs six per eight and reads its four weight rows from L2 at the cache's full rate.
// Long rows (the MLP's down projection) are split into column blocks of at most
// blockCols, so that four tokens' slices of x stay in L1 while the tile's rows stream
// from L2. Tiles are claimed from a shared counter, not split in equal halves, so a
// thread that loses its core to another process delays the product by one tile, not by
// half of it. A row's sums depend only on that row and the weight, never on T or on which
// worker ran its tile, so a row computes the same alone as with others (batching relies
// on it).

// blocked reports whether gemm takes the blocked path for T >= 4 (tests turn it off and
// on). It is off where the 4×3 kernel has no assembly: in plain Go the blocked path is
// no faster than the two-token one.
var blocked = gemmSIMD

// blockCols is the most columns of one kernel pass: 4 tokens × 1024 floats = 16 KiB.
const blockCols = 1024

// tileRows is the weight rows of one tile: 24 (a multiple of the kernel's 3), 12 for rows
// longer than 2048 so that the dequantized tile stays well inside L2.
func tileRows(in int) int {
	if in > 2048 {
		return 12
	}
	return 24
}

func (b *Backend) gemmBlocked(out, x []float32, T int, w *weight) {
	in, outCols := w.in, w.out
	rows := tileRows(in)
	tiles := (outCols + rows - 1) / rows
	nb := (in + blockCols - 1) / blockCols
	kc := ((in+nb-1)/nb + 7) &^ 7 // column block, a multiple of 8

	// The last 1-3 tokens run as a full group of four over a zero-padded copy.
	T4 := T &^ 3
	var xt []float32
	if T4 < T {
		xt = b.alloc(4 * in)
		defer b.release([][]float32{xt})
		n := copy(xt, x[T4*in:T*in])
		clear(xt[n:])
	}
	var next atomic.Int64
	work := func() {
		buf := b.alloc((rows + 2) * in)
		defer b.release([][]float32{buf})
		var acc [12]float32
		for {
			tile := int(next.Add(1)) - 1
			if tile >= tiles {
				return
			}
			o0 := tile * rows
			nr := min(rows, outCols-o0)
			nr3 := (nr + 2) / 3 * 3
			var src []float32
			switch {
			case w.q.Quantized():
				src = buf[:nr3*in]
				w.dequantizeRows(src, o0, nr)
				clear(src[nr*in:])
			case nr3 == nr:
				src = w.f[o0*in : (o0+nr)*in]
			default:
				src = buf[:nr3*in]
				copy(src, w.f[o0*in:(o0+nr)*in])
				clear(src[nr*in:])
			}
			for k0 := 0; k0 < in; k0 += kc {
				kn := min(kc, in-k0)
				for t0 := 0; t0 < T; t0 += 4 {
					xs := x[t0*in:]
					if t0 == T4 {
						xs = xt
					}
					nt := min(4, T-t0)
					for r := 0; r < nr3; r += 3 {
						if direct := nt == 4 && r+3 <= nr && kn&7 == 0 && gemmSIMD; direct {
							// Sums straight into out: the same arithmetic as below.
							_, _, _ = xs[3*in+k0+kn-1], src[(r+2)*in+k0+kn-1], out[(t0+3)*outCols+o0+r+2]
							dot4x3To(&xs[k0], in, &src[r*in+k0], in, kn, &out[t0*outCols+o0+r], outCols, k0 > 0)
							continue
						}
						kernel4x3(&acc, xs[k0:], in, src[r*in+k0:], in, kn)
						for t := 0; t < nt; t++ {
							y := out[(t0+t)*outCols+o0+r:]
							for j := 0; j < 3 && r+j < nr; j++ {
								if k0 == 0 {
									y[j] = acc[3*t+j]
								} else {
									y[j] += acc[3*t+j]
								}
							}
						}
					}
				}
			}
		}
	}
	// Each goroutine of the shared crew runs work, which claims tiles until none are left.
	threads := min(b.threads, tiles)
	crew.Run(threads, threads, threads-1, func(int, int) { work() })
}

// kernel4x3 sets acc[3t+r] = x_t · w_r over n columns for 4 rows of x (xstride apart) and
// 3 rows of w (wstride apart): the assembly kernel over the multiple of 8, the rest added
// in order.
func kernel4x3(acc *[12]float32, x []float32, xstride int, w []float32, wstride int, n int) {
	_, _ = x[3*xstride+n-1], w[2*wstride+n-1]
	n8 := n &^ 7
	if gemmSIMD && n8 > 0 {
		dot4x3(&x[0], xstride, &w[0], wstride, n8, acc)
	} else {
		dot4x3Ref(acc, x, xstride, w, wstride, n8)
	}
	for i := n8; i < n; i++ {
		for t := 0; t < 4; t++ {
			xv := x[t*xstride+i]
			for r := 0; r < 3; r++ {
				acc[3*t+r] += xv * w[r*wstride+i]
			}
		}
	}
}

// dot4x3Ref is the plain reference of dot4x3 (n a multiple of 8), summing in the same
// order: eight lanes per row pair, each lane over columns i ≡ lane (mod 8), then the lanes
// pairwise as the horizontal adds do.
func dot4x3Ref(acc *[12]float32, x []float32, xstride int, w []float32, wstride int, n int) {
	for t := 0; t < 4; t++ {
		for r := 0; r < 3; r++ {
			var l [8]float32
			xt, wr := x[t*xstride:t*xstride+n], w[r*wstride:r*wstride+n]
			for i := 0; i < n; i += 8 {
				for j := 0; j < 8; j++ {
					l[j] += xt[i+j] * wr[i+j]
				}
			}
			acc[3*t+r] = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
		}
	}
}
