package backend

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/mlxg/mlxg/internal/half"
	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/residency"
)

// Result is one check of one backend: the largest absolute difference from the
// reference, relative to the reference's largest magnitude.
type Result struct {
	Check   string // e.g. "Linear affine 4-bit g64"
	Backend string
	Against string  // "reference" (plain Go kernels in this package) or the CPU backend's name
	RelErr  float64 // max|got-want| / max|want|
	Tol     float64
	Err     error
	// Uncovered, when set, says why the check could not run at all (an architecture no
	// tiny checkpoint exists for yet): neither a pass nor a failure, and reported as such.
	Uncovered string
	// Note adds what the reader needs to weigh the result (a fallback path taken).
	Note string
	// Stream is the residency manager's counters at the end of a streaming check.
	Stream *residency.Stats
}

// OK reports whether the check ran and stayed within its tolerance.
func (r Result) OK() bool { return r.Uncovered == "" && r.Err == nil && r.RelErr <= r.Tol }

// Status is the word a report prints for r: PASS, FAIL or NOT COVERED.
func (r Result) Status() string {
	switch {
	case r.Uncovered != "":
		return "NOT COVERED"
	case r.OK():
		return "PASS"
	}
	return "FAIL"
}

// Precision is how a backend under test computes, which picks each check's tolerance.
type Precision int

const (
	// Float32 backends compute every operation in float32, as the references do: the
	// CPU backend, MLX on the CPU.
	Float32 Precision = iota
	// Reduced backends round some inputs on the way: MLX on the GPU casts a product's
	// input to the weight's float type (fp16 or bf16), the CPU backend's 8-bit input
	// path quantizes a decode product's input to 8 bits.
	Reduced
)

func (p Precision) String() string {
	if p == Reduced {
		return "reduced precision"
	}
	return "float32"
}

// Tol is a check's tolerance on the relative error, for each Precision.
type Tol struct{ Float32, Reduced float64 }

// For is the tolerance for a backend of precision p.
func (t Tol) For(p Precision) float64 {
	if p == Reduced {
		return t.Reduced
	}
	return t.Float32
}

// The tolerances of the op table. A product's reduced tolerance follows the float type
// its input is cast to (fp16's 11 bits of mantissa, bf16's 8); the others are float32
// rounding, with room for a GPU's fast exp and tanh. Copies and gathers are exact
// everywhere (1e-6 is the reference's own rounding from float64).
var (
	tolCopy  = Tol{1e-6, 1e-6}
	tolArith = Tol{1e-4, 1e-3}
	tolF32   = Tol{1e-4, 1e-3}
	tolF16   = Tol{1e-4, 1e-2}
	tolBF16  = Tol{1e-4, 3e-2}
	// An affine 4-bit product in groups of 64 is also what the CPU backend's 8-bit
	// input path rounds to 8 bits: up to 9e-3 over 40 seeds.
	tolInt8 = Tol{1e-4, 2e-2}
)

func relErr(got, want []float32) (float64, error) {
	if len(got) != len(want) {
		return 0, fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	var diff, scale float64
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) || math.IsInf(g, 0) {
			return 0, fmt.Errorf("value %d is %v", i, g)
		}
		diff, scale = max(diff, math.Abs(g-w)), max(scale, math.Abs(w))
	}
	if scale == 0 {
		return diff, nil
	}
	return diff / scale, nil
}

// source is an in-memory compute.Source.
type source map[string]*safetensors.Tensor

func (s source) Tensor(name string) (*safetensors.Tensor, bool) { t, ok := s[name]; return t, ok }

func (s source) put(name string, dt safetensors.DType, shape []int, data []byte) {
	s[name] = &safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: dt, Shape: shape, End: int64(len(data))}, Data: data}
}

func (s source) floats(name string, dt safetensors.DType, shape []int, x []float32) {
	b := make([]byte, len(x)*dt.Size())
	for i, v := range x {
		switch dt {
		case safetensors.F32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		case safetensors.F16:
			binary.LittleEndian.PutUint16(b[2*i:], half.F32ToF16(v))
		case safetensors.BF16:
			binary.LittleEndian.PutUint16(b[2*i:], half.F32ToBF16(v))
		}
	}
	s.put(name, dt, shape, b)
}

func (s source) words(name string, shape []int, x []uint32) {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	s.put(name, safetensors.U32, shape, b)
}

// stored is x as the backend will read it back from dt.
func stored(x []float32, dt safetensors.DType) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		switch dt {
		case safetensors.F16:
			v = half.F16ToF32(half.F32ToF16(v))
		case safetensors.BF16:
			v = half.BF16ToF32(half.F32ToBF16(v))
		}
		out[i] = v
	}
	return out
}

func randn(r *rand.Rand, n int, scale float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64()) * scale
	}
	return x
}

// matrix adds a random out×in weight under prefix in the format q (float in dt when q
// is zero) and returns the matrix the backend should compute with.
func (s source) matrix(r *rand.Rand, prefix string, out, in int, dt safetensors.DType, q compute.Quant) ([]float32, error) {
	w := randn(r, out*in, 0.1)
	switch {
	case !q.Quantized():
		s.floats(prefix+".weight", dt, []int{out, in}, w)
		return stored(w, dt), nil
	case q.Mode == quant.Affine:
		packed, scales, biases, err := quant.Quantize(w, out, in, q.Bits, q.GroupSize)
		if err != nil {
			return nil, err
		}
		scales, biases = stored(scales, dt), stored(biases, dt)
		s.words(prefix+".weight", []int{out, quant.Words(in, q.Bits)}, packed)
		s.floats(prefix+".scales", dt, []int{out, in / q.GroupSize}, scales)
		s.floats(prefix+".biases", dt, []int{out, in / q.GroupSize}, biases)
		return quant.Dequantize(packed, scales, biases, out, in, q.Bits, q.GroupSize)
	default: // a float mode: random codes and scales near 1
		packed := make([]uint32, out*quant.Words(in, q.Bits))
		for i := range packed {
			packed[i] = r.Uint32()
		}
		scales := make([]uint8, out*in/q.GroupSize)
		for i := range scales {
			scales[i] = uint8(124 + r.IntN(4)) // E8M0 exponents 2^-3..2^0
			if q.Mode == quant.NVFP4 {
				scales[i] = uint8(0x30 + r.IntN(8)) // small positive E4M3 values
			}
		}
		s.words(prefix+".weight", []int{out, quant.Words(in, q.Bits)}, packed)
		s.put(prefix+".scales", safetensors.U8, []int{out, in / q.GroupSize}, scales)
		return quant.DequantizeFP(q.Mode, packed, scales, out, in)
	}
}

// opCase is one entry of the op table: one or more operations run on a backend, and
// want, their plain reference. ops names the interface methods it checks, as
// "Interface.Method" of runner/compute (TestDoctorOpTableCoversEveryOperation holds the
// table to every method of the interfaces there): a new operation gets one more entry.
type opCase struct {
	name string
	ops  []string
	tol  Tol
	run  func(b compute.Backend) ([]float32, error)
	want []float32
	// note, when set, says what b runs instead of an optional extension it lacks.
	note func(b compute.Backend) string
}

// harnessOps are the methods every check calls, whatever it checks: binding weights
// and vectors, making a context, reading its result and its error, closing it.
var harnessOps = []string{"Backend.Weight", "Backend.Vector", "Backend.NewContext",
	"Context.Float32s", "Context.Err", "Context.Close"}

// run evaluates one op in a fresh context.
func run(b compute.Backend, op func(c compute.Context) compute.Tensor) ([]float32, error) {
	c := b.NewContext()
	defer c.Close()
	t := op(c)
	if err := c.Err(); err != nil {
		return nil, err
	}
	return c.Float32s(t)
}

func opCases(seed uint64) ([]opCase, error) {
	r := rand.New(rand.NewPCG(seed, 0x6d6c7867))
	src := source{}
	var cases []opCase
	const T, in, out = 3, 128, 48

	// Inputs come in through Embed of a float32 "feed" matrix: rows of arbitrary values.
	feed := randn(r, 2*T*in, 1)
	src.floats("feed.weight", safetensors.F32, []int{2 * T, in}, feed)
	x, y := feed[:T*in], feed[T*in:]
	feeds := map[compute.Backend]compute.Weight{}
	prep := func(b compute.Backend) error {
		if _, ok := feeds[b]; ok {
			return nil
		}
		w, err := b.Weight(src, "feed", compute.Quant{})
		feeds[b] = w
		return err
	}
	// rowsOf is rows first..first+n-1 of the feed (call prep first).
	rowsOf := func(b compute.Backend, c compute.Context, first, n int) compute.Tensor {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(first + i)
		}
		return c.Embed(feeds[b], ids)
	}

	// Embed and Linear over each weight format.
	formats := []struct {
		name string
		dt   safetensors.DType
		q    compute.Quant
		tol  Tol
	}{
		{"f32", safetensors.F32, compute.Quant{}, tolF32},
		{"f16", safetensors.F16, compute.Quant{}, tolF16},
		{"bf16", safetensors.BF16, compute.Quant{}, tolBF16},
		{"affine 4-bit g64", safetensors.F16, compute.Quant{Mode: quant.Affine, Bits: 4, GroupSize: 64}, tolInt8},
		{"affine 8-bit g32", safetensors.BF16, compute.Quant{Mode: quant.Affine, Bits: 8, GroupSize: 32}, tolBF16},
		{"affine 3-bit g32", safetensors.F16, compute.Quant{Mode: quant.Affine, Bits: 3, GroupSize: 32}, tolF16},
		{"affine 6-bit g128", safetensors.F16, compute.Quant{Mode: quant.Affine, Bits: 6, GroupSize: 128}, tolF16},
		{"mxfp4", "", compute.Quant{Mode: quant.MXFP4, Bits: 4, GroupSize: 32}, tolBF16},
		{"mxfp8", "", compute.Quant{Mode: quant.MXFP8, Bits: 8, GroupSize: 32}, tolBF16},
		{"nvfp4", "", compute.Quant{Mode: quant.NVFP4, Bits: 4, GroupSize: 16}, tolBF16},
	}
	// The products the batching checks reuse: the f32 matrix with its bias and the
	// 4-bit one, and their references over every row of the feed.
	var mats []linMat
	for _, f := range formats {
		prefix := "w." + f.name
		w, err := src.matrix(r, prefix, out, in, f.dt, f.q)
		if err != nil {
			return nil, fmt.Errorf("making %s weights: %w", f.name, err)
		}
		bias := randn(r, out, 0.5)
		if f.dt == safetensors.F32 {
			src.floats(prefix+".bias", safetensors.F32, []int{out}, bias)
		}
		tokens := []int32{5, 0, int32(out - 1), 17}
		wantEmbed := make([]float32, 0, len(tokens)*in)
		for _, id := range tokens {
			wantEmbed = append(wantEmbed, w[int(id)*in:(int(id)+1)*in]...)
		}
		if f.dt != safetensors.F32 {
			bias = nil
		}
		wantLinear := linearRef(x, T, in, w, out, bias)
		q := f.q
		if f.name == "f32" || f.name == "affine 4-bit g64" {
			mats = append(mats, linMat{f.name, prefix, q, f.tol, linearRef(feed, 2*T, in, w, out, bias)})
		}
		embedTol := tolCopy
		if q.Quantized() {
			embedTol = Tol{1e-5, 1e-5} // dequantized in float32, perhaps with fused multiply-adds
		}
		cases = append(cases,
			opCase{"Embed " + f.name, []string{"Context.Embed"}, embedTol, func(b compute.Backend) ([]float32, error) {
				wb, err := b.Weight(src, prefix, q)
				if err != nil {
					return nil, err
				}
				return run(b, func(c compute.Context) compute.Tensor { return c.Embed(wb, tokens) })
			}, wantEmbed, nil},
			opCase{"Linear " + f.name, []string{"Context.Linear"}, f.tol, func(b compute.Backend) ([]float32, error) {
				wb, err := b.Weight(src, prefix, q)
				if err != nil {
					return nil, err
				}
				if err := prep(b); err != nil {
					return nil, err
				}
				return run(b, func(c compute.Context) compute.Tensor { return c.Linear(rowsOf(b, c, 0, T), wb) })
			}, wantLinear, nil})
	}

	// RMSNorm.
	norm := randn(r, in, 1)
	src.floats("norm", safetensors.BF16, []int{in}, norm)
	norm = stored(norm, safetensors.BF16)
	const eps = 1e-5
	wantNorm := make([]float32, T*in)
	for t := 0; t < T; t++ {
		row := x[t*in : (t+1)*in]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(in)+eps)
		for i, v := range row {
			wantNorm[t*in+i] = float32(float64(v) * inv * float64(norm[i]))
		}
	}
	cases = append(cases, opCase{"RMSNorm", []string{"Context.RMSNorm"}, tolArith, func(b compute.Backend) ([]float32, error) {
		v, err := b.Vector(src, "norm")
		if err != nil {
			return nil, err
		}
		if err := prep(b); err != nil {
			return nil, err
		}
		return run(b, func(c compute.Context) compute.Tensor { return c.RMSNorm(rowsOf(b, c, 0, T), v, eps) })
	}, wantNorm, nil})

	// RoPE: plain, partial rotary, yarn (which scales cos and sin), interleaved pairs
	// (DeepSeek's layout) over part of the head, longrope switching from its short to
	// its long factors inside the pass (partial, as Phi-4-mini), and a query scale that
	// changes with the position (Ministral 3), also over interleaved pairs (a backend's
	// per-position path rotates both layouts).
	const headDim, offset = 32, 7
	short, long := make([]float64, headDim/4), make([]float64, headDim/4)
	for i := range short {
		short[i], long[i] = 1+float64(i)/8, 1+float64(i)
	}
	for _, rc := range []struct {
		name        string
		dims        int
		s           compute.RoPEScaling
		pos         *compute.PosScale
		interleaved bool
	}{
		{"RoPE", headDim, compute.RoPEScaling{}, nil, false},
		{"RoPE partial", headDim / 2, compute.RoPEScaling{}, nil, false},
		{"RoPE yarn", headDim, compute.RoPEScaling{Type: "yarn", Factor: 4, OriginalMaxPositions: 64}, nil, false},
		{"RoPE interleaved partial", headDim / 2, compute.RoPEScaling{}, nil, true},
		{"RoPE longrope", headDim / 2, compute.RoPEScaling{Type: "longrope", OriginalMaxPositions: offset + 2, ShortFactor: short, LongFactor: long}, nil, false},
		{"RoPE position scale", headDim, compute.RoPEScaling{Type: "yarn", Factor: 4, OriginalMaxPositions: 64}, &compute.PosScale{Beta: 0.1, Period: 3}, false},
		{"RoPE interleaved position scale", headDim, compute.RoPEScaling{}, &compute.PosScale{Beta: 0.1, Period: 3}, true},
	} {
		rope, err := compute.NewRoPE(rc.dims, 10000, rc.s, 256)
		if err == nil && rc.pos != nil {
			rope, err = rope.WithPosScale(*rc.pos)
		}
		if err != nil {
			return nil, err
		}
		rope.Interleaved = rc.interleaved
		want := slices.Clone(x)
		half := rc.dims / 2
		for t := 0; t < T; t++ {
			for h := 0; h < in/headDim; h++ {
				row := want[t*in+h*headDim : t*in+(h+1)*headDim]
				orig := slices.Clone(row)
				for j := 0; j < half; j++ {
					cos, sin := rope.CosSin(offset+t, j)
					a, b := j, j+half
					if rc.interleaved {
						a, b = 2*j, 2*j+1
					}
					row[a] = orig[a]*cos - orig[b]*sin
					row[b] = orig[b]*cos + orig[a]*sin
				}
			}
		}
		cases = append(cases, opCase{rc.name, []string{"Context.RoPE"}, tolArith, func(b compute.Backend) ([]float32, error) {
			if err := prep(b); err != nil {
				return nil, err
			}
			return run(b, func(c compute.Context) compute.Tensor { return c.RoPE(rowsOf(b, c, 0, T), rope, headDim, offset) })
		}, want, nil})
	}

	// Elementwise ops and views.
	swiglu, add, mul := make([]float32, T*in), make([]float32, T*in), make([]float32, T*in)
	for i := range swiglu {
		a, b := float64(x[i]), float64(y[i])
		swiglu[i] = float32(a / (1 + math.Exp(-a)) * b)
		add[i], mul[i] = float32(a+b), float32(a*b)
	}
	two := func(name string, tol Tol, want []float32, op func(c compute.Context, a, b compute.Tensor) compute.Tensor) opCase {
		return opCase{name, []string{"Context." + name}, tol, func(b compute.Backend) ([]float32, error) {
			if err := prep(b); err != nil {
				return nil, err
			}
			return run(b, func(c compute.Context) compute.Tensor { return op(c, rowsOf(b, c, 0, T), rowsOf(b, c, T, T)) })
		}, want, nil}
	}
	cases = append(cases,
		two("SwiGLU", tolArith, swiglu, compute.Context.SwiGLU),
		two("Add", tolCopy, add, compute.Context.Add),
		two("Mul", tolCopy, mul, compute.Context.Mul),
		opCase{"Rows+Reshape", []string{"Context.Rows", "Context.Reshape"}, tolCopy, func(b compute.Backend) ([]float32, error) {
			if err := prep(b); err != nil {
				return nil, err
			}
			return run(b, func(c compute.Context) compute.Tensor {
				return c.Reshape(c.Rows(rowsOf(b, c, 0, T), 1, 2), 2*in/headDim, headDim)
			})
		}, slices.Clone(x[in : 3*in]), nil})

	// Attention over each cache kind: a prefill of 5 positions, then two decode steps.
	const heads, kvHeads = 4, 2
	steps := []int{5, 1, 1}
	total := 7
	qs := randn(r, total*heads*headDim, 1)
	// Keys and values lie on the grids of the affine case's 8-bit keys and 4-bit values,
	// so that a backend quantizing the cache itself must find the very same codes: a
	// random value can sit at a rounding tie, where float details decide a whole step.
	ks, err := onGrid(randn(r, total*kvHeads*headDim, 1), headDim, 8, 32)
	if err != nil {
		return nil, err
	}
	vs, err := onGrid(randn(r, total*kvHeads*headDim, 1), headDim, 4, 32)
	if err != nil {
		return nil, err
	}
	src.floats("att.q.weight", safetensors.F32, []int{total, heads * headDim}, qs)
	src.floats("att.k.weight", safetensors.F32, []int{total, kvHeads * headDim}, ks)
	src.floats("att.v.weight", safetensors.F32, []int{total, kvHeads * headDim}, vs)
	scale := float32(1 / math.Sqrt(headDim))
	for _, kc := range []struct {
		name string
		spec kvstore.Spec
		tol  Tol
	}{
		{"fp16", kvstore.SpecF16, tolF16},
		{"affine k8/v4", kvstore.Spec{K: kvstore.AffineFormat(8, 32), V: kvstore.AffineFormat(4, 32)}, tolBF16},
		{"q4_0", kvstore.Spec{K: kvstore.FormatQ4_0, V: kvstore.FormatQ4_0}, tolBF16},
		// The policy's default: 6-bit keys and values, Hadamard-rotated (in groups of 64 where
		// head_dim allows; 32 here).
		{"affine k6h/v6h", kvstore.Spec{K: kvstore.AffineFormat(6, 32).Rotate(true), V: kvstore.AffineFormat(6, 32).Rotate(true)}, tolBF16},
	} {
		kq, vq := roundTrip(ks, kc.spec.K, headDim), roundTrip(vs, kc.spec.V, headDim)
		want := attention(qs, kq, vq, total, steps, heads, kvHeads, headDim, scale)
		spec := kc.spec
		cases = append(cases, opCase{"Attention " + kc.name + " cache", []string{"Context.Attention"}, kc.tol, func(b compute.Backend) ([]float32, error) {
			var cache kvstore.Layer
			var err error
			if spec == kvstore.SpecF16 {
				cache, err = kvstore.NewFull(kvHeads, headDim, headDim, false)
			} else {
				cache, err = kvstore.NewQuantized(kvHeads, headDim, headDim, spec, 0)
			}
			if err != nil {
				return nil, err
			}
			var w [3]compute.Weight
			for i, name := range []string{"att.q", "att.k", "att.v"} {
				if w[i], err = b.Weight(src, name, compute.Quant{}); err != nil {
					return nil, err
				}
			}
			var out []float32
			pos := 0
			for _, n := range steps {
				ids := make([]int32, n)
				for i := range ids {
					ids[i] = int32(pos + i)
				}
				got, err := run(b, func(c compute.Context) compute.Tensor {
					return c.Attention(c.Embed(w[0], ids), c.Embed(w[1], ids), c.Embed(w[2], ids), cache, heads, scale)
				})
				if err != nil {
					return nil, err
				}
				out = append(out, got...)
				pos += n
			}
			return out, nil
		}, want, nil})
	}
	// AttentionSinks (gpt-oss) over the caches its layers use: full attention in fp16 or
	// quantized, and a sliding window of 4 (the prefill of 5 already reaches past it) in
	// fp16 or quantized.
	sinks := randn(r, heads, 1)
	src.floats("att.sinks", safetensors.F32, []int{heads}, sinks)
	for _, kc := range []struct {
		name   string
		spec   kvstore.Spec
		window int
		tol    Tol
	}{
		{"fp16", kvstore.SpecF16, 0, tolF16},
		{"affine k8/v4", kvstore.Spec{K: kvstore.AffineFormat(8, 32), V: kvstore.AffineFormat(4, 32)}, 0, tolBF16},
		{"sliding window fp16", kvstore.SpecF16, 4, tolF16},
		{"sliding window affine k8/v4", kvstore.Spec{K: kvstore.AffineFormat(8, 32), V: kvstore.AffineFormat(4, 32)}, 4, tolBF16},
		{"sliding window q4_0", kvstore.Spec{K: kvstore.FormatQ4_0, V: kvstore.FormatQ4_0}, 4, tolBF16},
	} {
		sinkWant := attentionRef(qs, roundTrip(ks, kc.spec.K, headDim), roundTrip(vs, kc.spec.V, headDim), total, heads, kvHeads, headDim, scale, sinks, kc.window)
		spec, window := kc.spec, kc.window
		cases = append(cases, opCase{"AttentionSinks " + kc.name + " cache", []string{"SinkAttentionContext.AttentionSinks"}, kc.tol, func(b compute.Backend) ([]float32, error) {
			if err := compute.Supports[compute.SinkAttentionContext](b, "attention with sinks"); err != nil {
				return nil, err
			}
			var cache kvstore.Layer
			var err error
			switch {
			case window > 0:
				cache, err = kvstore.NewRotating(kvHeads, headDim, headDim, window, spec, 0)
			case spec == kvstore.SpecF16:
				cache, err = kvstore.NewFull(kvHeads, headDim, headDim, false)
			default:
				cache, err = kvstore.NewQuantized(kvHeads, headDim, headDim, spec, 0)
			}
			if err != nil {
				return nil, err
			}
			var w [3]compute.Weight
			for i, name := range []string{"att.q", "att.k", "att.v"} {
				if w[i], err = b.Weight(src, name, compute.Quant{}); err != nil {
					return nil, err
				}
			}
			sv, err := b.Vector(src, "att.sinks")
			if err != nil {
				return nil, err
			}
			var out []float32
			pos := 0
			for _, n := range steps {
				ids := make([]int32, n)
				for i := range ids {
					ids[i] = int32(pos + i)
				}
				got, err := run(b, func(c compute.Context) compute.Tensor {
					sc, _ := compute.Ext[compute.SinkAttentionContext](c)
					return sc.AttentionSinks(c.Embed(w[0], ids), c.Embed(w[1], ids), c.Embed(w[2], ids), cache, heads, scale, sv)
				})
				if err != nil {
					return nil, err
				}
				out = append(out, got...)
				pos += n
			}
			return out, nil
		}, sinkWant, nil})
	}
	// AttentionSpans: a prefill of 5 positions whose rows 1 to 3 are one image, then 2 rows
	// ending an image that began in the prefill's last row (a prefix hit inside an image),
	// over each cache kind Gemma 3's layers use: full attention in fp16 or quantized (q4_0's
	// step is stored before the attention reads the blocks, where the others' are rounded on
	// the device), and a sliding window of 4 (whose second pass sees the image's first row
	// through the widened window). AttentionShared with the same spans: in each pass
	// AttentionSpans fills the cache and another layer's queries (the rows of att.q in
	// reverse) read it under the same mask, as Gemma 4's KV-shared layers do.
	spanSteps, spanSets := []int{5, 2}, [][]kvstore.Span{{{Start: 1, End: 4}}, {{Start: 4, End: 7}}}
	qRev := make([]float32, 0, len(qs))
	for p := total - 1; p >= 0; p-- {
		qRev = append(qRev, qs[p*heads*headDim:(p+1)*heads*headDim]...)
	}
	for _, kc := range []struct {
		name   string
		spec   kvstore.Spec
		window int
		tol    Tol
	}{
		{"fp16", kvstore.SpecF16, 0, tolF16},
		{"affine k8/v4", kvstore.Spec{K: kvstore.AffineFormat(8, 32), V: kvstore.AffineFormat(4, 32)}, 0, tolBF16},
		{"q4_0", kvstore.Spec{K: kvstore.FormatQ4_0, V: kvstore.FormatQ4_0}, 0, tolBF16},
		{"sliding window fp16", kvstore.SpecF16, 4, tolF16},
	} {
		kq, vq := roundTrip(ks, kc.spec.K, headDim), roundTrip(vs, kc.spec.V, headDim)
		refSpans := []kvstore.Span{{Start: 1, End: 4}, {Start: 5, End: 7}}
		spec, window := kc.spec, kc.window
		for _, shared := range []bool{false, true} {
			name, op, want := "AttentionSpans ", "SpanAttentionContext.AttentionSpans", attentionSpans(qs, kq, vq, total, heads, kvHeads, headDim, scale, refSpans, window)
			if shared {
				name, op, want = "AttentionShared spans ", "SharedKVContext.AttentionShared", attentionSpans(qRev, kq, vq, total, heads, kvHeads, headDim, scale, refSpans, window)
			}
			cases = append(cases, opCase{name + kc.name + " cache", []string{op}, kc.tol, func(b compute.Backend) ([]float32, error) {
				if err := compute.Supports[compute.SpanAttentionContext](b, "attention among an image's tokens"); err != nil {
					return nil, err
				}
				if err := compute.Supports[compute.SharedKVContext](b, "attention over another layer's KV"); shared && err != nil {
					return nil, err
				}
				var cache kvstore.Layer
				var err error
				switch {
				case window > 0:
					cache, err = kvstore.NewRotating(kvHeads, headDim, headDim, window, spec, 0)
				case spec == kvstore.SpecF16:
					cache, err = kvstore.NewFull(kvHeads, headDim, headDim, false)
				default:
					cache, err = kvstore.NewQuantized(kvHeads, headDim, headDim, spec, 0)
				}
				if err != nil {
					return nil, err
				}
				var w [3]compute.Weight
				for i, name := range []string{"att.q", "att.k", "att.v"} {
					if w[i], err = b.Weight(src, name, compute.Quant{}); err != nil {
						return nil, err
					}
				}
				var out []float32
				pos := 0
				for k, n := range spanSteps {
					ids, rev := make([]int32, n), make([]int32, n)
					for i := range ids {
						ids[i], rev[i] = int32(pos+i), int32(total-1-pos-i)
					}
					got, err := run(b, func(c compute.Context) compute.Tensor {
						sc, _ := compute.Ext[compute.SpanAttentionContext](c)
						o := sc.AttentionSpans(c.Embed(w[0], ids), c.Embed(w[1], ids), c.Embed(w[2], ids), cache, heads, scale, spanSets[k])
						if !shared {
							return o
						}
						shc, _ := compute.Ext[compute.SharedKVContext](c)
						return shc.AttentionShared(c.Embed(w[0], rev), cache, heads, scale, spanSets[k])
					})
					if err != nil {
						return nil, err
					}
					out = append(out, got...)
					pos += n
				}
				return out, nil
			}, want, nil})
		}
	}
	// AttentionShared: each step's queries over the cache the step's Attention filled in
	// the same pass (a KV-shared layer's reading of its source), the same as that attention.
	sharedWant := attention(qs, roundTrip(ks, kvstore.SpecF16.K, headDim), roundTrip(vs, kvstore.SpecF16.V, headDim), total, steps, heads, kvHeads, headDim, scale)
	cases = append(cases, opCase{"AttentionShared fp16 cache", []string{"SharedKVContext.AttentionShared"}, tolF16, func(b compute.Backend) ([]float32, error) {
		if err := compute.Supports[compute.SharedKVContext](b, "attention over another layer's KV"); err != nil {
			return nil, err
		}
		cache, err := kvstore.NewFull(kvHeads, headDim, headDim, false)
		if err != nil {
			return nil, err
		}
		var w [3]compute.Weight
		for i, name := range []string{"att.q", "att.k", "att.v"} {
			if w[i], err = b.Weight(src, name, compute.Quant{}); err != nil {
				return nil, err
			}
		}
		var out []float32
		pos := 0
		for _, n := range steps {
			ids := make([]int32, n)
			for i := range ids {
				ids[i] = int32(pos + i)
			}
			// In one pass, as a model runs it: the source layer's attention appends
			// the step's keys and values, the shared layer reads them.
			got, err := run(b, func(c compute.Context) compute.Tensor {
				c.Attention(c.Embed(w[0], ids), c.Embed(w[1], ids), c.Embed(w[2], ids), cache, heads, scale)
				sc, _ := compute.Ext[compute.SharedKVContext](c)
				return sc.AttentionShared(c.Embed(w[0], ids), cache, heads, scale, nil)
			})
			if err != nil {
				return nil, err
			}
			out = append(out, got...)
			pos += n
		}
		return out, nil
	}, sharedWant, nil})
	f := feeder{prep: prep, rowsOf: rowsOf, x: x, y: y, T: T, in: in}
	ext, err := extCases(r, src, f)
	if err != nil {
		return nil, err
	}
	cases = append(cases, ext...)
	cases = append(cases, visionCases(r, src, f)...)
	return append(cases, passCases(src, f, mats)...), nil
}

// onGrid is x (rows of dim values) quantized and dequantized with MLX's affine
// algorithm: values that quantize to themselves.
func onGrid(x []float32, dim, bits, group int) ([]float32, error) {
	packed, scales, biases, err := quant.Quantize(x, len(x)/dim, dim, bits, group)
	if err != nil {
		return nil, err
	}
	return quant.Dequantize(packed, scales, biases, len(x)/dim, dim, bits, group)
}

// roundTrip is x (rows of kvHeads·dim) as cache format f stores it.
func roundTrip(x []float32, f kvstore.Format, dim int) []float32 {
	if f.Rotated {
		// Stored as H·x, read back as H·(stored) (H is its own inverse).
		rot := slices.Clone(x)
		for i := 0; i+dim <= len(rot); i += dim {
			kvstore.Hadamard(rot[i : i+dim])
		}
		out := roundTrip(rot, f.Rotate(false), dim)
		for i := 0; i+dim <= len(out); i += dim {
			kvstore.Hadamard(out[i : i+dim])
		}
		return out
	}
	out := make([]float32, len(x))
	switch f.Mode {
	case kvstore.F16:
		return stored(x, safetensors.F16)
	case kvstore.Affine:
		rows := len(x) / dim
		packed, scales, biases, err := quant.Quantize(x, rows, dim, f.Bits, f.Group)
		if err != nil {
			panic(err) // the formats above are valid for dim
		}
		// kvstore keeps scales and biases as fp16.
		d, _ := quant.Dequantize(packed, stored(scales, safetensors.F16), stored(biases, safetensors.F16), rows, dim, f.Bits, f.Group)
		return d
	case kvstore.Q4_0:
		for b := 0; b < len(x); b += 32 {
			blk := x[b : b+32]
			var amax, m float32
			for _, v := range blk {
				if a := float32(math.Abs(float64(v))); a > amax {
					amax, m = a, v
				}
			}
			d := half.F16ToF32(half.F32ToF16(m / -8))
			inv := float32(0)
			if d != 0 {
				inv = 1 / d
			}
			for i, v := range blk {
				q := min(15, max(0, int(v*inv+8.5)))
				out[b+i] = float32(q-8) * d
			}
		}
	}
	return out
}

// attention is the plain causal grouped-query attention of each step's queries over
// every position appended so far.
func attention(q, k, v []float32, total int, steps []int, heads, kvHeads, dim int, scale float32) []float32 {
	return attentionRef(q, k, v, total, heads, kvHeads, dim, scale, nil, 0)
}

// attentionSpans is causal attention in which a row inside one of spans also sees the
// later rows of its span (the spans as the mask sees them: a span's rows already computed
// before a pass are left out); with window > 0 a row sees the window positions ending at
// its own and, inside a span, every position of the span.
func attentionSpans(q, k, v []float32, total, heads, kvHeads, dim int, scale float32, spans []kvstore.Span, window int) []float32 {
	out := make([]float32, total*heads*dim)
	rep := heads / kvHeads
	for p := 0; p < total; p++ {
		first, end := 0, p+1
		if window > 0 {
			first = max(0, p-window+1)
		}
		for _, s := range spans {
			if p >= s.Start && p < s.End {
				end = s.End
				first = min(first, s.Start)
			}
		}
		for h := 0; h < heads; h++ {
			kh := h / rep
			qv := q[(p*heads+h)*dim : (p*heads+h+1)*dim]
			scores := make([]float64, end) // positions before first stay at e^-inf = 0
			m := math.Inf(-1)
			for j := range first {
				scores[j] = math.Inf(-1)
			}
			for j := first; j < end; j++ {
				var s float64
				for d := 0; d < dim; d++ {
					s += float64(qv[d]) * float64(k[(j*kvHeads+kh)*dim+d])
				}
				scores[j] = s * float64(scale)
				m = max(m, scores[j])
			}
			var sum float64
			for j := range scores {
				scores[j] = math.Exp(scores[j] - m)
				sum += scores[j]
			}
			o := out[(p*heads+h)*dim : (p*heads+h+1)*dim]
			for j, s := range scores {
				for d := 0; d < dim; d++ {
					o[d] += float32(s / sum * float64(v[(j*kvHeads+kh)*dim+d]))
				}
			}
		}
	}
	return out
}

// attentionRef is attention with one sink logit per query head joining each softmax's
// denominator (gpt-oss), or none when sinks is nil; with window > 0 position p sees
// only the window positions ending at p.
func attentionRef(q, k, v []float32, total, heads, kvHeads, dim int, scale float32, sinks []float32, window int) []float32 {
	out := make([]float32, total*heads*dim)
	rep := heads / kvHeads
	for p := 0; p < total; p++ {
		first := 0
		if window > 0 {
			first = max(0, p-window+1)
		}
		for h := 0; h < heads; h++ {
			kh := h / rep
			qv := q[(p*heads+h)*dim : (p*heads+h+1)*dim]
			scores := make([]float64, p+1) // positions before first stay at e^-inf = 0
			m := math.Inf(-1)
			for j := range scores {
				scores[j] = math.Inf(-1)
			}
			for j := first; j <= p; j++ {
				var s float64
				for d := 0; d < dim; d++ {
					s += float64(qv[d]) * float64(k[(j*kvHeads+kh)*dim+d])
				}
				scores[j] = s * float64(scale)
				m = max(m, scores[j])
			}
			if sinks != nil {
				m = max(m, float64(sinks[h]))
			}
			var sum float64
			for j := range scores {
				scores[j] = math.Exp(scores[j] - m)
				sum += scores[j]
			}
			if sinks != nil {
				sum += math.Exp(float64(sinks[h]) - m)
			}
			o := out[(p*heads+h)*dim : (p*heads+h+1)*dim]
			for j, s := range scores {
				for d := 0; d < dim; d++ {
					o[d] += float32(s / sum * float64(v[(j*kvHeads+kh)*dim+d]))
				}
			}
		}
	}
	return out
}

// CheckOps runs every compute operation on b with random inputs and compares it with
// the plain reference kernels, and with ref (the CPU backend) when b is another one,
// each within its tolerance for a backend of precision p.
func CheckOps(b, ref compute.Backend, p Precision, seed uint64) ([]Result, error) {
	cases, err := opCases(seed)
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, c := range cases {
		got, err := c.run(b)
		tol := c.tol.For(p)
		res := Result{Check: c.name, Backend: b.Name(), Against: "reference", Tol: tol, Err: err}
		if c.note != nil {
			res.Note = c.note(b)
		}
		if err == nil {
			res.RelErr, res.Err = relErr(got, c.want)
		}
		out = append(out, res)
		if ref == nil || ref == b {
			continue
		}
		cmp := Result{Check: c.name, Backend: b.Name(), Against: ref.Name(), Tol: tol, Err: err}
		if err == nil {
			want, rerr := c.run(ref)
			if rerr != nil {
				cmp.Err = fmt.Errorf("on %s: %w", ref.Name(), rerr)
			} else {
				cmp.RelErr, cmp.Err = relErr(got, want)
			}
		}
		out = append(out, cmp)
	}
	return out, nil
}

// Opener makes a backend for one model load. A backend with a Close method is closed
// before the model is: Metal's weights wrap the checkpoint's mmapped pages.
type Opener func() (compute.Backend, error)
