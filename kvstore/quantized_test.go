package kvstore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/mlxg/mlxg/internal/half"
	"github.com/mlxg/mlxg/internal/quant"
)

var allFormats = func() []Format {
	fs := []Format{FormatF16, FormatQ4_0}
	for _, b := range []int{2, 3, 4, 5, 6, 8} {
		for _, g := range []int{16, 32, 64, 128} {
			fs = append(fs, AffineFormat(b, g))
		}
	}
	return fs
}()

func f16round(x float32) float32 { return half.F16ToF32(half.F32ToF16(x)) }

// refQ4_0 is llama.cpp's q4_0 written out per element: the reference for the codec.
func refQ4_0(x []float32) []float32 {
	out := make([]float32, len(x))
	for b := 0; b < len(x); b += 32 {
		var amax, m float64
		for _, v := range x[b : b+32] {
			if math.Abs(float64(v)) > amax {
				amax, m = math.Abs(float64(v)), float64(v)
			}
		}
		d := f16round(float32(m / -8))
		for j, v := range x[b : b+32] {
			var q int8 // llama.cpp: (int8_t)(x*id + 8.5f), at most 15
			if d != 0 {
				q = min(15, int8(v*(1/d)+8.5))
			}
			out[b+j] = d * float32(q-8)
		}
	}
	return out
}

// refDequant is what a row of f stores for x, computed without rowCodec: internal/quant's
// whole-matrix Quantize/Dequantize with fp16 scales and biases (as MLX stores them), the
// per-element q4_0 above, or fp16 rounding.
//
// A rotated format stores the rotation of x: its reference is that stored row rotated
// back, H·deq(H·x), which attention over the rotated row with a rotated query, rotated
// back, equals. H·x is Hadamard's (TestHadamard checks it against the matrix): the
// codes are a step function of it, so it must be the same float32s the cache
// quantizes; the rotation back is the matrix's, in float64.
func refDequant(f Format, x []float32, dim int) []float32 {
	if f.Rotated {
		hx := append([]float32(nil), x...)
		hadamardRows(hx, dim)
		return refRotate(refDequant(f.Rotate(false), hx, dim), dim)
	}
	switch {
	case f.Mode == Affine && f.Group == minKVGroup:
		// Groups of 16 are the cache's own (quant.Quantize stops at 32): quantized row by
		// row, decoded by the formula.
		out := make([]float32, len(x))
		codes, sc, bi := make([]uint32, quant.Words(dim, f.Bits)), make([]float32, dim/16), make([]float32, dim/16)
		for r := 0; r < len(x); r += dim {
			quant.QuantizeRow(codes, sc, bi, x[r:r+dim], f.Bits, 16)
			quant.Codes(out[r:r+dim], codes, 0, f.Bits)
			for j := range dim {
				out[r+j] = f16round(sc[j/16])*out[r+j] + f16round(bi[j/16])
			}
		}
		return out
	case f.Mode == Affine:
		rows := len(x) / dim
		packed, sc, bi, err := quant.Quantize(x, rows, dim, f.Bits, f.Group)
		if err != nil {
			panic(err)
		}
		for i := range sc {
			sc[i], bi[i] = f16round(sc[i]), f16round(bi[i])
		}
		out, err := quant.Dequantize(packed, sc, bi, rows, dim, f.Bits, f.Group)
		if err != nil {
			panic(err)
		}
		return out
	case f.Mode == Q4_0:
		return refQ4_0(x)
	}
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = f16round(v)
	}
	return out
}

func TestRowCodecRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	const dim, rows = 128, 64
	for _, f := range allFormats {
		c := newRowCodec(f, dim)
		if c.bytes() != f.RowBytes(dim) {
			t.Errorf("%v: codec stores %d bytes per row, arithmetic says %d", f, c.bytes(), f.RowBytes(dim))
		}
		x := randVec(r, rows*dim)
		for i := range x[:dim] { // one row with an offset, one all-positive, one constant
			x[i] += 3
			x[dim+i] = float32(math.Abs(float64(x[dim+i])))
			x[2*dim+i] = 0.75
		}
		s := c.newSeg(rows)
		for i := 0; i < rows; i++ {
			c.put(s, i, x[i*dim:(i+1)*dim])
		}
		got := make([]float32, rows*dim)
		for i := 0; i < rows; i++ {
			c.get(got[i*dim:], s, i)
		}
		want := refDequant(f, x, dim)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%v: element %d decodes to %v, reference %v (input %v)", f, i, got[i], want[i], x[i])
			}
		}
		if f.Mode == Affine { // the packed codes are MLX's layout, word for word
			packed, _, _, _ := quant.Quantize(x, rows, dim, f.Bits, f.Group)
			for i := range packed {
				if packed[i] != s.codes[i] {
					t.Fatalf("%v: word %d = %#x, MLX layout %#x", f, i, s.codes[i], packed[i])
				}
			}
		}
		// Error bound: one quantization step of the group's range (MLX moves the step to make
		// the group's edge exact, so the far end can be off by more than half), + fp16 rounding.
		for g := 0; g < len(x); g += max(f.Group, 1) {
			n := max(f.Group, 1)
			lo, hi := x[g], x[g]
			for _, v := range x[g : g+n] {
				lo, hi = min(lo, v), max(hi, v)
			}
			var step float64
			switch f.Mode {
			case Affine:
				step = float64(hi-lo) / float64(int(1)<<f.Bits-1)
			case Q4_0:
				step = 2 * math.Max(math.Abs(float64(lo)), math.Abs(float64(hi))) / 8 // |d| <= max/8, error <= d (clamp at 15)
			}
			bound := step + 2e-3*math.Max(math.Abs(float64(lo)), math.Abs(float64(hi)))
			for j := g; j < g+n; j++ {
				if e := math.Abs(float64(got[j] - x[j])); e > bound {
					t.Fatalf("%v: element %d error %v over bound %v", f, j, e, bound)
				}
			}
		}
	}
}

// storedCache is the reference's view of a quantized cache of length positions, allK
// and allV appended, that quantizes at start: fp16 rows before, dequantCache's after.
// converted records the length at which it converted (0 when it never held fp16).
func storedCache(spec Spec, allK, allV []float32, kvHeads, kDim, vDim, length, start int, converted *int) ([]float32, []float32) {
	if length < start {
		return refDequant(FormatF16.Rotate(spec.K.Rotated), allK, kDim), refDequant(FormatF16.Rotate(spec.V.Rotated), allV, vDim)
	}
	if *converted == 0 && start > 0 {
		*converted = length
	}
	return dequantCache(spec, allK, allV, kDim, vDim, kvHeads*kDim, kvHeads*vDim, *converted)
}

// dequantCache is the reference's view of a cache: every position's rows decoded as
// refDequant does; the first `converted` positions (of kw and vw floats each) were stored
// as fp16 and re-quantized from that when the cache reached quantized_kv_start.
func dequantCache(spec Spec, k, v []float32, kDim, vDim, kw, vw, converted int) ([]float32, []float32) {
	k16 := append(refDequant(FormatF16.Rotate(spec.K.Rotated), k[:converted*kw], kDim), k[converted*kw:]...)
	v16 := append(refDequant(FormatF16.Rotate(spec.V.Rotated), v[:converted*vw], vDim), v[converted*vw:]...)
	return refDequant(spec.K, k16, kDim), refDequant(spec.V, v16, vDim)
}

func TestQuantizedAttend(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	const kvHeads, heads, kDim, vDim = 2, 4, 64, 64
	specs := []Spec{
		{K: AffineFormat(8, 64), V: AffineFormat(4, 32)},
		{K: AffineFormat(4, 32), V: AffineFormat(4, 32)},
		{K: AffineFormat(3, 64), V: AffineFormat(2, 32)},
		{K: AffineFormat(5, 32), V: AffineFormat(6, 64)},
		{K: FormatQ4_0, V: FormatQ4_0},
		{K: FormatF16, V: AffineFormat(4, 64)},
		// The default, and 6-bit in the other groups: fused kernels at decode on amd64, tiles
		// (the Go 6-bit unpack) for prefill and on other CPUs.
		{K: AffineFormat(6, 64).Rotate(true), V: AffineFormat(6, 64).Rotate(true)},
		{K: AffineFormat(6, 32), V: AffineFormat(6, 16)},
	}
	for _, spec := range specs {
		for _, start := range []int{0, 300} {
			t.Run(fmt.Sprintf("%v start %d", spec, start), func(t *testing.T) {
				c, err := NewQuantized(kvHeads, kDim, vDim, spec, start)
				if err != nil {
					t.Fatal(err)
				}
				var allK, allV []float32
				converted := 0                            // positions stored as fp16 before the conversion
				for _, n := range []int{200, 90, 1, 40} { // crosses a block at 256; converts at 331
					k, v := randVec(r, n*kvHeads*kDim), randVec(r, n*kvHeads*vDim)
					if err := c.Append(k, v, n); err != nil {
						t.Fatal(err)
					}
					allK, allV = append(allK, k...), append(allV, v...)
					refK, refV := storedCache(spec, allK, allV, kvHeads, kDim, vDim, c.Len(), start, &converted)
					q := randVec(r, n*heads*kDim)
					out := make([]float32, n*heads*vDim)
					scale := float32(1 / math.Sqrt(kDim))
					if err := c.Attend(Attention{Q: q, Out: out, N: n, Heads: heads, Scale: scale, Threads: 2}); err != nil {
						t.Fatal(err)
					}
					want := refAttention(q, refK, refV, n, c.Len(), heads, kvHeads, kDim, vDim, float64(scale))
					for i := range want {
						if math.Abs(float64(out[i]-want[i])) > 3e-5 {
							t.Fatalf("len %d: element %d = %v, reference on the dequantized cache %v", c.Len(), i, out[i], want[i])
						}
					}
				}
				if got, want := c.Bytes(), int64(c.Len())*int64(spec.TokenBytes(kvHeads, kDim, vDim)); got != want {
					t.Errorf("Bytes %d, spec arithmetic %d", got, want)
				}
				if c.Spec() != spec {
					t.Errorf("Spec() = %v after conversion", c.Spec())
				}
			})
		}
	}
}

func TestQuantizedStartStaysFP16(t *testing.T) {
	c, err := NewQuantized(1, 32, 32, Spec{K: AffineFormat(4, 32), V: AffineFormat(4, 32)}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Append(make([]float32, 99*32), make([]float32, 99*32), 99); err != nil {
		t.Fatal(err)
	}
	if c.Spec() != SpecF16 || !c.Converts() || c.Bytes() != 99*2*32*2 {
		t.Fatalf("below quantized_kv_start: spec %v, converts %v, %d bytes", c.Spec(), c.Converts(), c.Bytes())
	}
	_ = c.Append(make([]float32, 32), make([]float32, 32), 1)
	if c.Spec().K != AffineFormat(4, 32) || c.Converts() || c.Bytes() != 100*2*(16+4) {
		t.Fatalf("at quantized_kv_start: spec %v, converts %v, %d bytes", c.Spec(), c.Converts(), c.Bytes())
	}
	f, _ := NewFull(1, 32, 32, true)
	if f.Spec() != SpecF16 || f.Converts() {
		t.Fatalf("Full: spec %v, converts %v", f.Spec(), f.Converts())
	}
}

// TestQuantizedAttendAllocations: attention over a long quantized cache allocates far
// less than a float32 copy of its keys would take: it dequantizes tile by tile.
func TestQuantizedAttendAllocations(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	const kvHeads, heads, dim, n = 2, 8, 128, 4096
	c, _ := NewQuantized(kvHeads, dim, dim, Spec{K: AffineFormat(8, 64), V: AffineFormat(4, 32)}, 0)
	if err := c.Append(randVec(r, n*kvHeads*dim), randVec(r, n*kvHeads*dim), n); err != nil {
		t.Fatal(err)
	}
	q, out := randVec(r, heads*dim), make([]float32, heads*dim)
	attend := func() {
		if err := c.Attend(Attention{Q: q, Out: out, N: 1, Heads: heads, Scale: 0.1, Threads: 2}); err != nil {
			t.Fatal(err)
		}
	}
	attend() // warm the scratch pool
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	attend()
	runtime.ReadMemStats(&after)
	full := uint64(n * kvHeads * dim * 4)
	if got := after.TotalAlloc - before.TotalAlloc; got > full/8 {
		t.Errorf("Attend allocated %d bytes; a float32 copy of the keys is %d", got, full)
	}
}

func TestQuantizedErrors(t *testing.T) {
	if _, err := NewQuantized(2, 64, 64, Spec{K: AffineFormat(8, 128), V: AffineFormat(4, 32)}, 0); err == nil {
		t.Error("group 128 over head_dim 64 accepted")
	}
	if _, err := NewQuantized(2, 64, 64, Spec{K: AffineFormat(7, 64), V: AffineFormat(4, 32)}, 0); err == nil {
		t.Error("7 bits accepted")
	}
	if _, err := NewQuantized(0, 64, 64, SpecF16, 0); err == nil {
		t.Error("0 heads accepted")
	}
	c, _ := NewQuantized(1, 32, 32, Spec{K: FormatQ4_0, V: FormatQ4_0}, 0)
	if err := c.Append(make([]float32, 31), make([]float32, 32), 1); err == nil {
		t.Error("short keys accepted")
	}
	if err := c.Truncate(1); err == nil {
		t.Error("truncating an empty cache to 1 accepted")
	}
}
