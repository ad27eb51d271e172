package cpu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
)

// BenchmarkMisaligned times a product with the same weight bound from tensors at offset 0
// and at offsets 1 and 2 past a 64-byte-aligned start (as after Gemma 4's two-byte
// layer_scalar), interleaved round by round so that all see the same machine, and reports
// the median time of each and their ratio (offN/aligned), for decode (1 row) and prefill
// (32 rows). Offsets 4 and 64 are controls: whatever 1 and 2 cost beyond 4 is the price of
// reading misaligned elements in place; what 4 costs beyond 64 is vector loads straddling
// cache lines, which any tensor not 32-byte aligned always paid. Run against an older
// checkout, the same benchmark times that checkout's aligned path and its copy of the
// misaligned weight (scripts/unalignedbench runs both checkouts in turn).
func BenchmarkMisaligned(b *testing.B) {
	const rounds = 15
	r := rand.New(rand.NewPCG(5, 5))
	for _, f := range []struct {
		name    string
		q       compute.Quant
		out, in int
		rows    []int
	}{
		// 4096×4096 stays in a server's last-level cache: the kernels' own cost.
		{"affine4g64", compute.Quant{Mode: quant.Affine, Bits: 4, GroupSize: 64}, 4096, 4096, []int{1, 32}},
		{"affine3g64", compute.Quant{Mode: quant.Affine, Bits: 3, GroupSize: 64}, 4096, 4096, []int{1, 32}},
		{"affine8g64", compute.Quant{Mode: quant.Affine, Bits: 8, GroupSize: 64}, 4096, 4096, []int{1, 32}},
		{"mxfp4", compute.Quant{Mode: quant.MXFP4, Bits: 4, GroupSize: 32}, 4096, 4096, []int{1, 32}},
		// 64 MiB of codes is read from memory, as a real model's decode step reads them.
		{"affine4g64-64MiB", compute.Quant{Mode: quant.Affine, Bits: 4, GroupSize: 64}, 8192, 16384, []int{1}},
	} {
		out, in := f.out, f.in
		ref := source{}
		q := f.q
		words := quant.Words(in, q.Bits)
		if q.Mode == quant.Affine {
			packed, scales, biases, err := quant.Quantize(randVec(r, out*in), out, in, q.Bits, q.GroupSize)
			if err != nil {
				b.Fatal(err)
			}
			ref.putU32("w.weight", []int{out, words}, packed)
			ref.putFloat("w.scales", safetensors.BF16, []int{out, in / q.GroupSize}, scales)
			ref.putFloat("w.biases", safetensors.BF16, []int{out, in / q.GroupSize}, biases)
		} else {
			packed := make([]uint32, out*words)
			for i := range packed {
				packed[i] = r.Uint32()
			}
			ref.putU32("w.weight", []int{out, words}, packed)
			sc := make([]byte, out*in/q.GroupSize)
			for i := range sc {
				sc[i] = byte(120 + r.IntN(14))
			}
			ref["w.scales"] = &safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: "w.scales", DType: safetensors.U8, Shape: []int{out, in / q.GroupSize}, End: int64(len(sc))}, Data: sc}
		}
		bind := func(off int) (*Backend, *weight) {
			src := source{}
			for name, tt := range ref {
				buf := make([]byte, len(tt.Data)+off+64)
				start := int(-uintptr(unsafe.Pointer(&buf[0])) & 63) // the first 64-byte-aligned byte
				d := buf[start+off : start+off+len(tt.Data)]
				copy(d, tt.Data)
				src[name] = &safetensors.Tensor{TensorInfo: tt.TensorInfo, Data: d}
			}
			be := New(1)
			w, err := be.Weight(src, "w", q)
			if err != nil {
				b.Fatal(err)
			}
			return be, w.(*weight)
		}
		// Controls, each in a buffer of its own like 1 and 2: offset 4 is aligned for every
		// element type but not for a 32-byte vector load (which the reader always allowed),
		// offset 64 aligned for both: what the buffer's placement alone costs.
		offs := []int{0, 1, 2, 4, 64}
		bes, ws := make([]*Backend, len(offs)), make([]*weight, len(offs))
		for i, off := range offs {
			bes[i], ws[i] = bind(off)
		}
		for _, T := range f.rows {
			b.Run(fmt.Sprintf("%s/T=%d", f.name, T), func(b *testing.B) {
				x, y := randVec(r, T*in), make([]float32, T*out)
				start := time.Now()
				bes[0].linear(y, x, T, ws[0])
				reps := max(1, int(time.Millisecond/max(time.Since(start), 1))) // short products repeated to 1 ms
				times := make([][]float64, len(offs))
				for b.Loop() {
					for range rounds {
						for i := range offs {
							start = time.Now()
							for range reps {
								bes[i].linear(y, x, T, ws[i])
							}
							times[i] = append(times[i], float64(time.Since(start).Nanoseconds())/float64(reps))
						}
					}
				}
				med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
				b.ReportMetric(med(times[0])/1e3, "aligned-µs")
				for i, off := range offs[1:] {
					b.ReportMetric(med(times[i+1])/1e3, fmt.Sprintf("off%d-µs", off))
					b.ReportMetric(med(times[i+1])/med(times[0]), fmt.Sprintf("off%d/aligned", off))
				}
			})
		}
	}
}
