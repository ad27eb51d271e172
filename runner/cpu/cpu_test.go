package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/mlxg/mlxg/internal/half"
	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
)

// source is an in-memory checkpoint.
type source map[string]*safetensors.Tensor

func (s source) Tensor(name string) (*safetensors.Tensor, bool) { t, ok := s[name]; return t, ok }

func (s source) putFloat(name string, dt safetensors.DType, shape []int, v []float32) {
	b := make([]byte, len(v)*dt.Size())
	for i, x := range v {
		switch dt {
		case safetensors.F32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		case safetensors.F16:
			binary.LittleEndian.PutUint16(b[2*i:], half.F32ToF16(x))
		case safetensors.BF16:
			binary.LittleEndian.PutUint16(b[2*i:], half.F32ToBF16(x))
		}
	}
	s[name] = &safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: dt, Shape: shape, End: int64(len(b))}, Data: b}
}

func (s source) putU32(name string, shape []int, v []uint32) {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	s[name] = &safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: safetensors.U32, Shape: shape, End: int64(len(b))}, Data: b}
}

func randVec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// refLinear is x·wᵀ + bias in float64.
func refLinear(x, w, bias []float32, T, out, in int) []float64 {
	y := make([]float64, T*out)
	for t := 0; t < T; t++ {
		for o := 0; o < out; o++ {
			var s float64
			for i := 0; i < in; i++ {
				s += float64(x[t*in+i]) * float64(w[o*in+i])
			}
			if bias != nil {
				s += float64(bias[o])
			}
			y[t*out+o] = s
		}
	}
	return y
}

func closeTo(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > tol*(1+math.Abs(want[i])) {
			t.Fatalf("%s: element %d = %v, reference %v", what, i, got[i], want[i])
		}
	}
}

func toF64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func run(t *testing.T, b *Backend, f func(c compute.Context) compute.Tensor) []float32 {
	t.Helper()
	c := b.NewContext()
	defer c.Close()
	out, err := c.Float32s(f(c))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLinearFloat covers every float dtype, row counts that are and are not multiples
// of the 4-row kernel, and input sizes that exercise its 16-wide loop, its 8-wide tail
// and the scalar remainder.
func TestLinearFloat(t *testing.T) { bothKernels(t, testLinearFloat) }

// bothKernels runs a test with the assembly kernels (where the CPU has them) and with
// the plain Go ones.
func bothKernels(t *testing.T, test func(*testing.T)) {
	for _, on := range []bool{true, false} {
		prev := quant.SetSIMD(on)
		t.Logf("assembly kernels requested: %v", on)
		test(t)
		quant.SetSIMD(prev)
	}
}

func testLinearFloat(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	const out = 37
	for i, dt := range []safetensors.DType{safetensors.F32, safetensors.F16, safetensors.BF16, safetensors.F32, safetensors.F32} {
		in := []int{96, 104, 100, 5, 8}[i]
		src := source{}
		w, bias := randVec(r, out*in), randVec(r, out)
		src.putFloat("l.weight", dt, []int{out, in}, w)
		src.putFloat("l.bias", safetensors.F32, []int{out}, bias)
		wt, _ := src["l.weight"].Float32s() // what the dtype keeps
		for _, threads := range []int{1, 3} {
			b := New(threads)
			lw, err := b.Weight(src, "l", compute.Quant{})
			if err != nil {
				t.Fatal(err)
			}
			if o, i := lw.Dims(); o != out || i != in {
				t.Fatalf("Dims %d %d", o, i)
			}
			for _, T := range []int{1, 3, 70} {
				x := randVec(r, T*in)
				xw := input(t, b, T, in, x)
				got := run(t, b, func(c compute.Context) compute.Tensor { return c.Linear(c.Embed(xw, seq(T)), lw) })
				closeTo(t, string(dt), got, refLinear(x, wt, bias, T, out, in), 1e-5)
			}
		}
	}
}

// input binds rows as an embedding table so tests can feed any activation.
func input(t *testing.T, b *Backend, rows, cols int, x []float32) compute.Weight {
	t.Helper()
	src := source{}
	src.putFloat("x.weight", safetensors.F32, []int{rows, cols}, x)
	w, err := b.Weight(src, "x", compute.Quant{})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func seq(n int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(i)
	}
	return ids
}

// TestLinearQuantized covers every bits×group through both the decode path (T < 4,
// straight from codes) and the prefill path (dequantized tiles), against a float64
// product with the dequantized matrix.
func TestLinearQuantized(t *testing.T) { bothKernels(t, testLinearQuantized) }

func testLinearQuantized(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	const out, in = 35, 256
	b := New(3)
	// Scales and biases stored as MLX checkpoints store them (bf16 or fp16, read in place),
	// as float32, and in two dtypes (widened to float32 at load); the reference uses the same
	// rounded values.
	dtypes := [][2]safetensors.DType{{safetensors.BF16, safetensors.BF16}, {safetensors.F16, safetensors.F16},
		{safetensors.F32, safetensors.F32}, {safetensors.F16, safetensors.BF16}}
	for i, bits := range []int{2, 3, 4, 5, 6, 8} {
		for j, group := range []int{32, 64, 128} {
			dt := dtypes[(i*3+j)%len(dtypes)]
			w := randVec(r, out*in)
			packed, scales, biases, err := quant.Quantize(w, out, in, bits, group)
			if err != nil {
				t.Fatal(err)
			}
			src := source{}
			src.putU32("l.weight", []int{out, in * bits / 32}, packed)
			src.putFloat("l.scales", dt[0], []int{out, in / group}, scales)
			src.putFloat("l.biases", dt[1], []int{out, in / group}, biases)
			bias := randVec(r, out)
			src.putFloat("l.bias", safetensors.F16, []int{out}, bias)
			bias, _ = src["l.bias"].Float32s()
			s16, _ := src["l.scales"].Float32s()
			b16, _ := src["l.biases"].Float32s()
			deq, _ := quant.Dequantize(packed, s16, b16, out, in, bits, group)
			lw, err := b.Weight(src, "l", compute.Quant{Mode: quant.Affine, Bits: bits, GroupSize: group})
			if err != nil {
				t.Fatal(err)
			}
			for _, T := range []int{1, 2, 5} {
				x := randVec(r, T*in)
				xw := input(t, b, T, in, x)
				got := run(t, b, func(c compute.Context) compute.Tensor { return c.Linear(c.Embed(xw, seq(T)), lw) })
				closeTo(t, "quantized linear", got, refLinear(x, deq, bias, T, out, in), 1e-4)
			}
			// Embedding rows from the quantized table.
			ids := []int32{3, 0, 34, 3}
			got := run(t, b, func(c compute.Context) compute.Tensor { return c.Embed(lw, ids) })
			var want []float64
			for _, id := range ids {
				want = append(want, toF64(deq[int(id)*in:(int(id)+1)*in])...)
			}
			closeTo(t, "quantized embedding", got, want, 1e-6)
		}
	}
}

func TestLinearFP(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	const out, in = 9, 64
	b := New(2)
	for _, mode := range []quant.Mode{quant.MXFP4, quant.MXFP8, quant.NVFP4} {
		bits, group, _ := quant.FPParams(mode)
		packed := make([]uint32, out*in*bits/32)
		for i := range packed {
			packed[i] = r.Uint32() & 0x77777777 // no e4m3 NaN bytes
		}
		sc := make([]byte, out*in/group)
		for i := range sc {
			sc[i] = byte(120 + r.IntN(10))
			if mode == quant.NVFP4 {
				sc[i] = byte(0x30 + r.IntN(16))
			}
		}
		src := source{}
		src.putU32("l.weight", []int{out, in * bits / 32}, packed)
		src["l.scales"] = &safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: "l.scales", DType: safetensors.U8, Shape: []int{out, in / group}, End: int64(len(sc))}, Data: sc}
		deq, err := quant.DequantizeFP(mode, packed, sc, out, in)
		if err != nil {
			t.Fatal(err)
		}
		lw, err := b.Weight(src, "l", compute.Quant{Mode: mode, Bits: bits, GroupSize: group})
		if err != nil {
			t.Fatal(err)
		}
		for _, T := range []int{1, 6} {
			x := randVec(r, T*in)
			xw := input(t, b, T, in, x)
			got := run(t, b, func(c compute.Context) compute.Tensor { return c.Linear(c.Embed(xw, seq(T)), lw) })
			closeTo(t, string(mode), got, refLinear(x, deq, nil, T, out, in), 1e-4)
		}
	}
}

func TestNormRoPESwiGLU(t *testing.T) { bothKernels(t, testNormRoPESwiGLU) }

func testNormRoPESwiGLU(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	b := New(2)
	const T, heads, hd = 5, 3, 16
	x := randVec(r, T*heads*hd)
	y := randVec(r, T*heads*hd)
	xw, yw := input(t, b, T, heads*hd, x), input(t, b, T, heads*hd, y)
	src := source{}
	nw := randVec(r, hd)
	src.putFloat("n", safetensors.BF16, []int{hd}, nw)
	nv, err := b.Vector(src, "n")
	if err != nil {
		t.Fatal(err)
	}
	nw, _ = src["n"].Float32s()

	// RMSNorm per head (a reshape to T·heads × hd).
	got := run(t, b, func(c compute.Context) compute.Tensor {
		return c.RMSNorm(c.Reshape(c.Embed(xw, seq(T)), T*heads, hd), nv, 1e-6)
	})
	want := make([]float64, len(x))
	for r := 0; r < T*heads; r++ {
		var ss float64
		for j := 0; j < hd; j++ {
			ss += float64(x[r*hd+j]) * float64(x[r*hd+j])
		}
		inv := 1 / math.Sqrt(ss/hd+1e-6)
		for j := 0; j < hd; j++ {
			want[r*hd+j] = float64(x[r*hd+j]) * inv * float64(nw[j])
		}
	}
	closeTo(t, "RMSNorm", got, want, 1e-5)

	// RoPE with partial rotation (12 of 16 dims) at offset 40, against the definition.
	rope, _ := compute.NewRoPE(12, 10000, compute.RoPEScaling{Type: "yarn", Factor: 2, OriginalMaxPositions: 64}, 128)
	got = run(t, b, func(c compute.Context) compute.Tensor { return c.RoPE(c.Embed(xw, seq(T)), rope, hd, 40) })
	for i := 0; i < T; i++ {
		for h := 0; h < heads; h++ {
			base := i*heads*hd + h*hd
			copy(want[base:base+hd], toF64(x[base:base+hd]))
			for j := 0; j < 6; j++ {
				ang := float64(float32(40+i) * rope.InvFreq[j])
				c, s := math.Cos(ang)*float64(rope.Scale), math.Sin(ang)*float64(rope.Scale)
				x1, x2 := float64(x[base+j]), float64(x[base+j+6])
				want[base+j] = x1*c - x2*s
				want[base+j+6] = x2*c + x1*s
			}
		}
	}
	closeTo(t, "RoPE", got, want, 1e-5)

	got = run(t, b, func(c compute.Context) compute.Tensor { return c.SwiGLU(c.Embed(xw, seq(T)), c.Embed(yw, seq(T))) })
	for i := range want {
		g := float64(x[i])
		want[i] = g / (1 + math.Exp(-g)) * float64(y[i])
	}
	closeTo(t, "SwiGLU", got, want, 1e-6)

	got = run(t, b, func(c compute.Context) compute.Tensor {
		return c.Rows(c.Add(c.Embed(xw, seq(T)), c.Mul(c.Embed(xw, seq(T)), c.Embed(yw, seq(T)))), 2, 2)
	})
	want = want[:2*heads*hd]
	for i := range want {
		k := 2*heads*hd + i
		want[i] = float64(x[k]) + float64(x[k])*float64(y[k])
	}
	closeTo(t, "Add/Mul/Rows", got, want, 1e-6)
}

// TestAttention runs two steps (a prefill of 5 rows, then one row) through Context.Attention
// and compares with plain causal GQA attention.
func TestAttention(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	b := New(2)
	const heads, kvHeads, hd = 4, 2, 32
	cache, _ := kvstore.NewFull(kvHeads, hd, hd, true)
	var allK, allV []float32
	for _, T := range []int{5, 1} {
		q, k, v := randVec(r, T*heads*hd), randVec(r, T*kvHeads*hd), randVec(r, T*kvHeads*hd)
		allK, allV = append(allK, k...), append(allV, v...)
		qw, kw, vw := input(t, b, T, heads*hd, q), input(t, b, T, kvHeads*hd, k), input(t, b, T, kvHeads*hd, v)
		got := run(t, b, func(c compute.Context) compute.Tensor {
			return c.Attention(c.Embed(qw, seq(T)), c.Embed(kw, seq(T)), c.Embed(vw, seq(T)), cache, heads, 0.125)
		})
		n := cache.Len()
		want := make([]float64, T*heads*hd)
		for i := 0; i < T; i++ {
			pos := n - T + i
			for h := 0; h < heads; h++ {
				kh := h / (heads / kvHeads)
				w := make([]float64, pos+1)
				var sum float64
				for j := range w {
					var s float64
					for d := 0; d < hd; d++ {
						s += float64(q[(i*heads+h)*hd+d]) * float64(allK[(j*kvHeads+kh)*hd+d])
					}
					w[j] = math.Exp(s * 0.125)
					sum += w[j]
				}
				for d := 0; d < hd; d++ {
					var o float64
					for j := range w {
						o += w[j] * float64(allV[(j*kvHeads+kh)*hd+d])
					}
					want[(i*heads+h)*hd+d] = o / sum
				}
			}
		}
		closeTo(t, "Attention", got, want, 1e-5)
	}
}

// TestErrors: bad shapes and ids become the context's error, never a panic.
func TestErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	b := New(1)
	src := source{}
	src.putFloat("l.weight", safetensors.F32, []int{4, 8}, randVec(r, 32))
	lw, _ := b.Weight(src, "l", compute.Quant{})
	c := b.NewContext()
	defer c.Close()
	x := c.Embed(lw, []int32{1, 9})
	if _, err := c.Float32s(x); err == nil || !strings.Contains(err.Error(), "token id 9") {
		t.Fatalf("out-of-range id: %v", err)
	}
	c2 := b.NewContext()
	defer c2.Close()
	y := c2.Linear(c2.Linear(c2.Embed(lw, []int32{1}), lw), lw) // 4 columns into a layer of 8
	if _, err := c2.Float32s(c2.Add(y, y)); err == nil || !strings.Contains(err.Error(), "4 columns") {
		t.Fatalf("shape mismatch: %v", err)
	}
	if _, err := b.Weight(src, "missing", compute.Quant{}); err == nil {
		t.Fatal("missing weight bound")
	}
	if _, err := b.Weight(src, "l", compute.Quant{Mode: quant.Affine, Bits: 4, GroupSize: 64}); err == nil || !strings.Contains(err.Error(), "U32") {
		t.Fatalf("float weight bound as quantized: %v", err)
	}
}

// TestFree: after Free(keep), keep (here a row view) survives the reuse of every other
// buffer by later ops.
func TestFree(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	b := New(1)
	x := randVec(r, 4*8)
	xw := input(t, b, 4, 8, x)
	c := b.NewContext()
	defer c.Close()
	a := c.Embed(xw, seq(4))
	keep := c.Rows(c.Add(a, a), 1, 2)
	compute.Free(c, keep)
	if n := len(c.(*context).bufs); n != 1 {
		t.Fatalf("%d buffers held after Free, want 1", n)
	}
	for i := 0; i < 3; i++ { // these reuse the freed buffers
		c.Mul(c.Embed(xw, seq(4)), c.Embed(xw, seq(4)))
	}
	got, err := c.Float32s(keep)
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "kept tensor", got, toF64(func() []float32 {
		w := make([]float32, 16)
		for i := range w {
			w[i] = 2 * x[8+i]
		}
		return w
	}()), 0)
}

// BenchmarkPrefillLinear: a 128-token prefill through a 4864×896 4-bit layer (Qwen2-0.5B's
// MLP up projection) on 2 threads.
func BenchmarkPrefillLinear(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 9))
	const T, out, in = 128, 4864, 896
	packed, scales, biases, _ := quant.Quantize(randVec(r, out*in), out, in, 4, 64)
	w := &weight{name: "bench", out: out, in: in, q: compute.Quant{Mode: quant.Affine, Bits: 4, GroupSize: 64},
		packed: packed, scales: quant.F32Scales(scales), biases: quant.F32Scales(biases)}
	x, y := randVec(r, T*in), make([]float32, T*out)
	be := New(2)
	for b.Loop() {
		be.linear(y, x, T, w)
	}
}

// TestView checks that checkpoint bytes are viewed in place when aligned, and when not
// either in place too (ReadsMisaligned) or copied, with the same values, for every element
// type the backend views.
func TestView(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 31))
	raw := make([]byte, 4*64+1)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	for _, off := range []int{0, 1} {
		b := raw[off : off+4*64]
		u16, u32, f32 := view[uint16](b), view[uint32](b), view[float32](b)
		if len(u16) != 128 || len(u32) != 64 || len(f32) != 64 {
			t.Fatalf("offset %d: lengths %d, %d, %d", off, len(u16), len(u32), len(f32))
		}
		for i := range u32 {
			want := binary.LittleEndian.Uint32(b[4*i:])
			if u32[i] != want || math.Float32bits(f32[i]) != want || u16[2*i] != uint16(want) || u16[2*i+1] != uint16(want>>16) {
				t.Fatalf("offset %d: element %d differs from the bytes", off, i)
			}
		}
		inPlace := &u32[0] == (*uint32)(unsafe.Pointer(&b[0]))
		if aligned := uintptr(unsafe.Pointer(&b[0]))%4 == 0; inPlace != (aligned || ReadsMisaligned) {
			t.Fatalf("offset %d: viewed in place %v, aligned %v, ReadsMisaligned %v", off, inPlace, aligned, ReadsMisaligned)
		}
	}
}

// TestTrim: a pass's buffers stay pooled for the next pass of the same shape, and a
// prefill-sized working set is dropped once a pass of another shape (decode) has closed,
// with results unchanged.
func TestTrim(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 41))
	const in, out = 64, 96
	b := New(1) // one thread: with two, how many workers take a piece (each with its own scratch) varies with the load
	src := source{}
	wv := randVec(r, out*in)
	src.putFloat("l.weight", safetensors.F32, []int{out, in}, wv)
	lw, err := b.Weight(src, "l", compute.Quant{})
	if err != nil {
		t.Fatal(err)
	}
	pass := func(T int) []float32 {
		x := randVec(r, T*in)
		xw := input(t, b, T, in, x)
		got := run(t, b, func(c compute.Context) compute.Tensor { return c.Linear(c.Embed(xw, seq(T)), lw) })
		closeTo(t, "linear", got, refLinear(x, wv, nil, T, out, in), 1e-5)
		return x
	}
	pass(40)
	big := b.pooled()
	if big < 40*out {
		t.Fatalf("%d floats pooled after a 40-token pass, want at least its %d-float output", big, 40*out)
	}
	pass(40)
	if n := b.pooled(); n != big {
		t.Fatalf("a second pass of the same shape left %d floats pooled, the first %d", n, big)
	}
	pass(1)
	if n := b.pooled(); n >= 40*out {
		t.Fatalf("%d floats still pooled after a 1-token pass, the 40-token working set (%d) was not dropped", n, big)
	}
}

// TestLinearInt8 checks UseInt8: decode-sized products (T < 4) of 4-bit weights in groups of
// 64 and 128 are within what rounding the inputs to 8 bits per group allows of the float64
// product, and are not the float backend's numbers (the integer path ran); prefill-sized
// ones (T = 5), and other bit widths and groups, are the float backend's, bit for bit.
func TestLinearInt8(t *testing.T) {
	if !quant.Int8Kernel() {
		t.Skip("no integer kernels on this machine")
	}
	r := rand.New(rand.NewPCG(2, 3))
	const out, in = 70, 512
	plain, b := New(2), New(2)
	b.UseInt8(true)
	for _, c := range []struct{ bits, group int }{{4, 64}, {4, 128}, {4, 32}, {8, 64}} {
		w := randVec(r, out*in)
		packed, scales, biases, err := quant.Quantize(w, out, in, c.bits, c.group)
		if err != nil {
			t.Fatal(err)
		}
		src := source{}
		src.putU32("l.weight", []int{out, in * c.bits / 32}, packed)
		src.putFloat("l.scales", safetensors.BF16, []int{out, in / c.group}, scales)
		src.putFloat("l.biases", safetensors.BF16, []int{out, in / c.group}, biases)
		s16, _ := src["l.scales"].Float32s()
		b16, _ := src["l.biases"].Float32s()
		deq, _ := quant.Dequantize(packed, s16, b16, out, in, c.bits, c.group)
		q := compute.Quant{Mode: quant.Affine, Bits: c.bits, GroupSize: c.group}
		lw, err := b.Weight(src, "l", q)
		if err != nil {
			t.Fatal(err)
		}
		pw, _ := plain.Weight(src, "l", q)
		for _, T := range []int{1, 2, 3, 5} {
			x := randVec(r, T*in)
			got := run(t, b, func(ctx compute.Context) compute.Tensor {
				return ctx.Linear(ctx.Embed(input(t, b, T, in, x), seq(T)), lw)
			})
			float := run(t, plain, func(ctx compute.Context) compute.Tensor {
				return ctx.Linear(ctx.Embed(input(t, plain, T, in, x), seq(T)), pw)
			})
			same := 0
			for i := range got {
				if math.Float32bits(got[i]) == math.Float32bits(float[i]) {
					same++
				}
			}
			if T >= 4 || !quant.Int8Supported(c.bits, c.group) {
				if same != len(got) {
					t.Errorf("%d-bit group %d, T=%d: a product the integer kernels do not take changed with 8-bit inputs", c.bits, c.group, T)
				}
				continue
			}
			if same == len(got) {
				t.Errorf("%d-bit group %d, T=%d: 8-bit inputs gave the float numbers: the integer path did not run", c.bits, c.group, T)
			}
			for tok := 0; tok < T; tok++ {
				xs := x[tok*in : (tok+1)*in]
				for o := 0; o < out; o++ {
					var exact, bound float64
					for j, xv := range xs {
						wj := float64(deq[o*in+j])
						exact += float64(xv) * wj
						var amax float64
						for _, v := range xs[j/c.group*c.group : (j/c.group+1)*c.group] {
							amax = max(amax, math.Abs(float64(v)))
						}
						bound += math.Abs(wj) * amax / 127 / 2
					}
					if e := math.Abs(float64(got[tok*out+o]) - exact); e > bound*1.001+1e-5 {
						t.Fatalf("%d-bit group %d, T=%d: output %d,%d = %v, float64 product %v: off by %.3g, more than 8-bit inputs allow (%.3g)",
							c.bits, c.group, T, tok, o, got[tok*out+o], exact, e, bound)
					}
				}
			}
		}
	}
}

// TestInt8BatchRows checks a batch's decode rows with 8-bit inputs (one row per sequence,
// declared as segments): each row's products are bit for bit the row's alone, for batches
// of 1 to 13 rows, i.e. one set of up to quant.Int8Vectors vectors per pass over the
// weights and several sets.
func TestInt8BatchRows(t *testing.T) {
	if !quant.Int8Kernel() {
		t.Skip("no integer kernels on this machine")
	}
	r := rand.New(rand.NewPCG(4, 1))
	const out, in = 70, 512
	b := New(2)
	b.UseInt8(true)
	for _, group := range []int{64, 128} {
		packed, scales, biases, err := quant.Quantize(randVec(r, out*in), out, in, 4, group)
		if err != nil {
			t.Fatal(err)
		}
		src := source{}
		src.putU32("l.weight", []int{out, in / 8}, packed)
		src.putFloat("l.scales", safetensors.BF16, []int{out, in / group}, scales)
		src.putFloat("l.biases", safetensors.BF16, []int{out, in / group}, biases)
		w, err := b.Weight(src, "l", compute.Quant{Mode: quant.Affine, Bits: 4, GroupSize: group})
		if err != nil {
			t.Fatal(err)
		}
		for _, T := range []int{2, 5, 8, 9, 13} {
			x := randVec(r, T*in)
			ones := make([]int, T)
			for i := range ones {
				ones[i] = 1
			}
			got := run(t, b, func(c compute.Context) compute.Tensor {
				c.(compute.BatchContext).Segments(ones)
				return c.Linear(c.Embed(input(t, b, T, in, x), seq(T)), w)
			})
			for tok := 0; tok < T; tok++ {
				alone := run(t, b, func(c compute.Context) compute.Tensor {
					return c.Linear(c.Embed(input(t, b, 1, in, x[tok*in:(tok+1)*in]), seq(1)), w)
				})
				for o, v := range alone {
					if math.Float32bits(got[tok*out+o]) != math.Float32bits(v) {
						t.Fatalf("group %d, %d rows: row %d output %d is %v in the batch, %v alone", group, T, tok, o, got[tok*out+o], v)
					}
				}
			}
		}
	}
}

// TestBatchRows checks a batch's decode rows with float inputs (one row per sequence,
// declared as segments, as a speculative verification pass declares them): each row's
// products are bit for bit the row's alone, for 4- and 8-bit weights in each group size and
// batches of 2 to 13 rows, i.e. one set of up to quant.VecsFor vectors per pass over the
// weights and several sets.
func TestBatchRows(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 2))
	const out, in = 70, 512
	b := New(2)
	for _, bits := range []int{4, 8} {
		for _, group := range []int{32, 64, 128} {
			packed, scales, biases, err := quant.Quantize(randVec(r, out*in), out, in, bits, group)
			if err != nil {
				t.Fatal(err)
			}
			src := source{}
			src.putU32("l.weight", []int{out, in * bits / 32}, packed)
			src.putFloat("l.scales", safetensors.BF16, []int{out, in / group}, scales)
			src.putFloat("l.biases", safetensors.BF16, []int{out, in / group}, biases)
			w, err := b.Weight(src, "l", compute.Quant{Mode: quant.Affine, Bits: bits, GroupSize: group})
			if err != nil {
				t.Fatal(err)
			}
			for _, T := range []int{2, 3, 5, 7, 9, 13} {
				x := randVec(r, T*in)
				ones := make([]int, T)
				for i := range ones {
					ones[i] = 1
				}
				got := run(t, b, func(c compute.Context) compute.Tensor {
					c.(compute.BatchContext).Segments(ones)
					return c.Linear(c.Embed(input(t, b, T, in, x), seq(T)), w)
				})
				for tok := 0; tok < T; tok++ {
					alone := run(t, b, func(c compute.Context) compute.Tensor {
						return c.Linear(c.Embed(input(t, b, 1, in, x[tok*in:(tok+1)*in]), seq(1)), w)
					})
					for o, v := range alone {
						if math.Float32bits(got[tok*out+o]) != math.Float32bits(v) {
							t.Fatalf("bits %d group %d, %d rows: row %d output %d is %v in the batch, %v alone", bits, group, T, tok, o, got[tok*out+o], v)
						}
					}
				}
			}
		}
	}
}

// TestInt8Batches checks UseInt8Batches: a batched pass's decode rows take 8-bit inputs
// (bit for bit each row's product alone with UseInt8), and a product alone stays in float
// (bit for bit the plain backend's).
func TestInt8Batches(t *testing.T) {
	if !quant.Int8Kernel() {
		t.Skip("no integer kernels on this machine")
	}
	r := rand.New(rand.NewPCG(5, 1))
	const out, in, group = 40, 256, 64
	packed, scales, biases, err := quant.Quantize(randVec(r, out*in), out, in, 4, group)
	if err != nil {
		t.Fatal(err)
	}
	src := source{}
	src.putU32("l.weight", []int{out, in / 8}, packed)
	src.putFloat("l.scales", safetensors.BF16, []int{out, in / group}, scales)
	src.putFloat("l.biases", safetensors.BF16, []int{out, in / group}, biases)
	batches, all, plain := New(2), New(2), New(2)
	batches.UseInt8Batches(true)
	all.UseInt8(true)
	if !strings.Contains(batches.Name(), "8-bit inputs in batches") {
		t.Errorf("Name %q does not say 8-bit inputs in batches", batches.Name())
	}
	linear := func(b *Backend, x []float32, T int, segs bool) []float32 {
		w, err := b.Weight(src, "l", compute.Quant{Mode: quant.Affine, Bits: 4, GroupSize: group})
		if err != nil {
			t.Fatal(err)
		}
		return run(t, b, func(c compute.Context) compute.Tensor {
			if segs {
				ones := make([]int, T)
				for i := range ones {
					ones[i] = 1
				}
				c.(compute.BatchContext).Segments(ones)
			}
			return c.Linear(c.Embed(input(t, b, T, in, x), seq(T)), w)
		})
	}
	same := func(a, b []float32) bool {
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				return false
			}
		}
		return true
	}
	const T = 5
	x := randVec(r, T*in)
	got := linear(batches, x, T, true)
	for tok := range T {
		row := x[tok*in : (tok+1)*in]
		if want := linear(all, row, 1, false); !same(got[tok*out:(tok+1)*out], want) {
			t.Errorf("row %d of a batch: not the 8-bit inputs' product alone", tok)
		}
		alone, float := linear(batches, row, 1, false), linear(plain, row, 1, false)
		if !same(alone, float) {
			t.Errorf("row %d alone: not the float product", tok)
		}
		if same(alone, got[tok*out:(tok+1)*out]) {
			t.Errorf("row %d: the same alone and in a batch: 8-bit inputs did not apply", tok)
		}
	}
}

// TestCopiedWeightBytes: a weight whose tensors lie at offsets not aligned for their
// element type (as after an odd-sized tensor in a checkpoint written without padding), at
// 1, 2 and 3 bytes past an 8-aligned start, gives products bit for bit those of the same
// tensors at offset 0, for every format the backend binds: affine 2 to 8 bits (bf16, fp16
// and f32 scales), mxfp4, mxfp8, nvfp4 and float weights (bf16, fp16, f32), through the
// decode kernels (1 and 3 rows, and 8-bit inputs where they apply) and the prefill tiles.
// Where the platform reads misaligned elements in place (ReadsMisaligned: amd64, arm64)
// nothing is copied; elsewhere CopiedWeightBytes counts exactly the misaligned quantized
// tensors' bytes (U8 scales, decoded anyway, and float weights, widened anyway, never).
func TestCopiedWeightBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 41))
	const out, in = 48, 256
	type format struct {
		name string
		q    compute.Quant
		dt   safetensors.DType // affine scales' and biases' dtype, or a float weight's
	}
	var formats []format
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, group := range []int{32, 64, 128} {
			formats = append(formats, format{fmt.Sprintf("affine%d/g%d", bits, group), compute.Quant{Mode: quant.Affine, Bits: bits, GroupSize: group}, safetensors.BF16})
		}
	}
	formats = append(formats,
		format{"affine4/f16", compute.Quant{Mode: quant.Affine, Bits: 4, GroupSize: 64}, safetensors.F16},
		format{"affine8/f32", compute.Quant{Mode: quant.Affine, Bits: 8, GroupSize: 64}, safetensors.F32},
		format{"affine4/f32", compute.Quant{Mode: quant.Affine, Bits: 4, GroupSize: 32}, safetensors.F32},
		format{"bf16", compute.Quant{}, safetensors.BF16},
		format{"f16", compute.Quant{}, safetensors.F16},
		format{"f32", compute.Quant{}, safetensors.F32})
	for _, m := range []quant.Mode{quant.MXFP4, quant.MXFP8, quant.NVFP4} {
		bits, group, err := quant.FPParams(m)
		if err != nil {
			t.Fatal(err)
		}
		formats = append(formats, format{string(m), compute.Quant{Mode: m, Bits: bits, GroupSize: group}, safetensors.U8})
	}
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			ref := source{}
			q := f.q
			switch {
			case !q.Quantized():
				ref.putFloat("w.weight", f.dt, []int{out, in}, randVec(r, out*in))
			case q.Mode == quant.Affine:
				packed, scales, biases, err := quant.Quantize(randVec(r, out*in), out, in, q.Bits, q.GroupSize)
				if err != nil {
					t.Fatal(err)
				}
				ref.putU32("w.weight", []int{out, quant.Words(in, q.Bits)}, packed)
				ref.putFloat("w.scales", f.dt, []int{out, in / q.GroupSize}, scales)
				ref.putFloat("w.biases", f.dt, []int{out, in / q.GroupSize}, biases)
			default:
				packed := make([]uint32, out*quant.Words(in, q.Bits))
				for i := range packed {
					packed[i] = r.Uint32()
				}
				ref.putU32("w.weight", []int{out, quant.Words(in, q.Bits)}, packed)
				sc := make([]byte, out*in/q.GroupSize)
				for i := range sc {
					sc[i] = byte(0x30 + r.IntN(0x60)) // finite E4M3 and E8M0 scales near 1
				}
				ref["w.scales"] = &safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: "w.scales", DType: safetensors.U8, Shape: []int{out, in / q.GroupSize}, End: int64(len(sc))}, Data: sc}
			}
			ref.putFloat("w.bias", safetensors.F32, []int{out}, randVec(r, out))
			int8 := q.Mode == quant.Affine && q.Bits == 4 && q.GroupSize >= 64 && quant.Int8Kernel()
			xs := map[int][]float32{}
			for _, T := range []int{1, 3, 17} {
				xs[T] = randVec(r, T*in)
			}
			want := map[string][]float32{}
			for _, off := range []int{0, 1, 2, 3} {
				// Each tensor at the offset from an 8-aligned start, as in a mapped file.
				src := source{}
				var copied int64
				for name, tt := range ref {
					buf := make([]uint64, (len(tt.Data)+off+7)/8)
					b := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), 8*len(buf))[off : off+len(tt.Data)]
					copy(b, tt.Data)
					src[name] = &safetensors.Tensor{TensorInfo: tt.TensorInfo, Data: b}
					if q.Quantized() && name != "w.bias" && tt.DType != safetensors.U8 && off%tt.DType.Size() != 0 {
						copied += int64(len(tt.Data))
					}
				}
				if ReadsMisaligned {
					copied = 0
				}
				for _, use8 := range []bool{false, true} {
					if use8 && !int8 {
						continue
					}
					be := New(2)
					be.UseInt8(use8)
					w, err := be.Weight(src, "w", q)
					if err != nil {
						t.Fatal(err)
					}
					if got := be.CopiedWeightBytes(); got != copied {
						t.Errorf("offset %d: CopiedWeightBytes %d, want %d", off, got, copied)
					}
					for _, T := range []int{1, 3, 17} {
						y := make([]float32, T*out)
						be.linear(y, xs[T], T, w.(*weight))
						key := fmt.Sprintf("T=%d int8=%v", T, use8)
						if off == 0 {
							want[key] = y
							continue
						}
						for i := range y {
							if math.Float32bits(y[i]) != math.Float32bits(want[key][i]) {
								t.Fatalf("offset %d, %s: output %d is %v, at offset 0 %v", off, key, i, y[i], want[key][i])
							}
						}
					}
				}
			}
		})
	}
}
