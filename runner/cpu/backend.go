// Package cpu is the pure-Go compute backend: the reference every other backend is
// checked against, the default on Linux, and what CI runs.
//
// It implements runner/compute for float weights (F32, F16, BF16, widened to float32 at
// load), MLX affine-quantized weights (bits 2, 3, 4, 5, 6, 8; group sizes 32, 64, 128;
// scales and biases in any float dtype, read in place from the checkpoint's mapping like the
// codes: no float32 copy is made), used directly on their packed codes, and the
// scale-only float modes mxfp4, mxfp8 and nvfp4. Work is spread over a fixed number of
// goroutines (runtime.NumCPU by default): matrix products split their output rows,
// attention its heads and rows. A decode step reads each packed weight byte once; a
// prefill dequantizes a tile of weight rows once and reuses it for every token.
//
// It also implements the optional interfaces of the hybrid and mixture-of-experts
// architectures (moe.go, linattn.go): compute.MoEContext (stacked [experts, out, in]
// weights, only the picked experts' rows read), compute.ActivationContext and
// compute.LinearAttentionContext (Gated DeltaNet's convolution and delta rule).
package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/mlxg/mlxg/internal/crew"
	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/residency"
)

// Backend is the CPU backend.
type Backend struct {
	threads int
	int8    int8Mode // UseInt8, UseInt8Batches

	mu     sync.Mutex
	free   map[int][][]float32 // released activation buffers by length
	used   map[int]uint64      // the context (serial) that last asked for each length
	serial uint64              // contexts made so far
	ropes  map[*compute.RoPE]*ropeTable
	slabs  []*slab // of closed contexts, for the next ones
	// live and peak count the floats of activation buffers handed out and not released
	// (ActivationPeak), whether new or from the pool.
	live, peak int
	last       atomic.Pointer[weight] // the first weight of the last decode product (warmNext)
	// copied counts the bytes of quantized weights that Weight copied out of the mapping
	// (CopiedWeightBytes).
	copied atomic.Int64

	streams map[*residency.Manager]*streamState // streamed experts by model (stream.go)
}

// New returns a CPU backend using threads goroutines; threads <= 0 means runtime.NumCPU().
func New(threads int) *Backend {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	return &Backend{threads: threads, free: map[int][][]float32{}, used: map[int]uint64{}, ropes: map[*compute.RoPE]*ropeTable{}}
}

// UseInt8 makes decode-time products with 4-bit affine weights (groups of 64 or 128) round
// their inputs to 8-bit integers per group and multiply in integers (quant.Vec8), as
// llama.cpp does on the CPU: on AVX2 the arithmetic runs faster than the float kernel's,
// most of all for a batch's rows, at the price of about 1e-2 relative on the logits, so it
// is off by default (the backend is the project's reference). It affects products of 1 to
// 3 rows (decode steps) and a batch's decode rows; prefill stays in float. It is a no-op
// where the integer kernels have no assembly (quant.Int8Kernel). Call it before the backend
// runs anything.
func (b *Backend) UseInt8(on bool) {
	b.int8 = int8Off
	if on && quant.Int8Kernel() {
		b.int8 = int8All
	}
}

// UseInt8Batches is UseInt8 for the decode rows of batched passes only (two sequences or
// more in one pass): a sequence alone keeps the float path, so its logits are the
// reference's, and in a batch they differ from alone by the inputs' rounding. This is
// where 8-bit inputs pay (several vectors per pass over the weights) while a single
// stream keeps full accuracy.
func (b *Backend) UseInt8Batches(on bool) {
	b.int8 = int8Off
	if on && quant.Int8Kernel() {
		b.int8 = int8Batches
	}
}

// int8Mode says which decode products take 8-bit inputs.
type int8Mode uint8

const (
	int8Off     int8Mode = iota // none: the float path everywhere
	int8Batches                 // a batched pass's decode rows (UseInt8Batches)
	int8All                     // every decode product (UseInt8)
)

// Threads returns the number of goroutines ops use.
func (b *Backend) Threads() int { return b.threads }

// Name implements compute.Backend.
func (b *Backend) Name() string {
	switch b.int8 {
	case int8All:
		return fmt.Sprintf("cpu (%d threads, 8-bit inputs)", b.threads)
	case int8Batches:
		return fmt.Sprintf("cpu (%d threads, 8-bit inputs in batches)", b.threads)
	}
	return fmt.Sprintf("cpu (%d threads)", b.threads)
}

// weight is a bound matrix: float32 rows, or packed codes with per-group scales (and
// biases in affine mode).
type weight struct {
	name    string
	out, in int
	q       compute.Quant
	f       []float32                     // out×in when not quantized
	packed  []uint32                      // out×Words(in, bits) when quantized
	scales  quant.Scales                  // out×in/group, as stored (float modes: decoded to float32)
	biases  quant.Scales                  // affine only, of the scales' type
	bias    []float32                     // optional, len out
	next    atomic.Pointer[weight]        // the weight whose product followed this one's (warmNext)
	warm    atomic.Pointer[crew.WarmTask] // the start of this weight's memory, to warm before its product
	stream  *streamed                     // a stacked expert matrix read through a residency manager (stream.go)
	dense   *denseRef                     // a dense layer's matrix read through a residency manager (dense.go)
	// transient: a view of a buffer that outlives no product (a streamed expert's);
	// warmNext neither learns it nor warms it.
	transient bool
}

func (w *weight) Dims() (int, int)     { return w.out, w.in }
func (w *weight) Quant() compute.Quant { return w.q }

type vector []float32

func (v vector) Len() int { return len(v) }

// Weight implements compute.Backend.
func (b *Backend) Weight(src compute.Source, prefix string, q compute.Quant) (compute.Weight, error) {
	t, rows, cols, err := compute.Matrix(src, prefix)
	if err != nil {
		return nil, err
	}
	w := &weight{name: prefix, out: rows, q: q}
	if !q.Quantized() {
		w.in = cols
		if w.f, err = floats(t); err != nil {
			return nil, err
		}
	} else if err = w.bindQuantized(src, t, cols); err != nil {
		return nil, err
	} else if err = b.bindStream(src, t, w); err != nil {
		return nil, err
	}
	if bt, ok := src.Tensor(prefix + ".bias"); ok {
		if w.bias, err = floats(bt); err != nil {
			return nil, err
		}
		if len(w.bias) != w.out {
			return nil, fmt.Errorf("tensor %q has %d values for a layer with %d outputs", prefix+".bias", len(w.bias), w.out)
		}
	}
	if q.Quantized() {
		b.copied.Add(w.copiedBytes(src, t))
		b.bindLayer(src, t, w)
	}
	return w, nil
}

// CopiedWeightBytes returns the bytes of quantized weights (codes, scales, biases) that
// Weight copied into memory of its own because the checkpoint stores them at an offset
// not aligned for their element type and the platform does not read them in place there
// (ReadsMisaligned, view). The process then holds them twice over, the copy beside the
// mapped pages it was read from: a checkpoint whose tensors follow an odd-sized one
// (Gemma 4's two-byte layer_scalar) without padding, which `mlxg create` avoids
// (safetensors.AlignedOrder). 0 where every weight is read in place: always on amd64 and
// arm64.
func (b *Backend) CopiedWeightBytes() int64 { return b.copied.Load() }

// copiedBytes is how many of the checkpoint's bytes bindQuantized copied for w because
// they were misaligned. Scales widened to float32 on purpose (a layer whose scales and
// biases differ in dtype) and the float modes' decoded scales are not copies of that kind.
func (w *weight) copiedBytes(src compute.Source, t *safetensors.Tensor) int64 {
	var n int64
	if !inPlace(w.packed, t.Data) {
		n += int64(len(t.Data))
	}
	for _, p := range []struct {
		s    quant.Scales
		name string
	}{{w.scales, ".scales"}, {w.biases, ".biases"}} {
		st, ok := src.Tensor(w.name + p.name)
		if !ok || st.DType == safetensors.U8 || p.s.Type == quant.ScaleF32 && st.DType != safetensors.F32 {
			continue
		}
		if !inPlace(p.s.F32, st.Data) || !inPlace(p.s.Bits, st.Data) {
			n += int64(len(st.Data))
		}
	}
	return n
}

// inPlace reports whether s is empty or starts at data's first byte: bound in the
// checkpoint's mapping, not copied.
func inPlace[T uint16 | uint32 | float32](s []T, data []byte) bool {
	return len(s) == 0 || len(data) == 0 || unsafe.Pointer(&s[0]) == unsafe.Pointer(&data[0])
}

func (w *weight) bindQuantized(src compute.Source, t *safetensors.Tensor, cols int) error {
	q := w.q
	if q.Mode == quant.Affine {
		if err := quant.CheckAffine(q.Bits, q.GroupSize); err != nil {
			return fmt.Errorf("layer %q: %w", w.name, err)
		}
	} else {
		bits, group, err := quant.FPParams(q.Mode)
		if err != nil {
			return fmt.Errorf("layer %q: %w", w.name, err)
		}
		if q.Bits != bits || q.GroupSize != group {
			return fmt.Errorf("layer %q: %s quantization is %d bits in groups of %d, the config says %d bits in groups of %d", w.name, q.Mode, bits, group, q.Bits, q.GroupSize)
		}
	}
	if t.DType != safetensors.U32 {
		return fmt.Errorf("tensor %q is %s, but the config says the layer is %d-bit quantized (packed U32 codes expected)", t.Name, t.DType, q.Bits)
	}
	w.in = cols * 32 / q.Bits
	if w.in%q.GroupSize != 0 {
		return fmt.Errorf("tensor %q: %d inputs are not a multiple of the group size %d", t.Name, w.in, q.GroupSize)
	}
	w.packed = uint32s(t.Data)
	groups := w.out * w.in / q.GroupSize
	st, ok := src.Tensor(w.name + ".scales")
	if !ok {
		return fmt.Errorf("checkpoint has no tensor %q for quantized layer %q", w.name+".scales", w.name)
	}
	if st.NumElements() != int64(groups) {
		return fmt.Errorf("tensor %q has %d values, want %d for a %d×%d matrix in groups of %d", st.Name, st.NumElements(), groups, w.out, w.in, q.GroupSize)
	}
	if q.Mode == quant.Affine {
		bt, ok := src.Tensor(w.name + ".biases")
		if !ok {
			return fmt.Errorf("checkpoint has no tensor %q for affine-quantized layer %q", w.name+".biases", w.name)
		}
		if bt.NumElements() != int64(groups) {
			return fmt.Errorf("tensor %q has %d values, want %d", bt.Name, bt.NumElements(), groups)
		}
		if st.DType != bt.DType {
			// The kernels read both in one type: widen both to float32 (MLX never mixes them).
			s, err := floats(st)
			if err != nil {
				return err
			}
			b, err := floats(bt)
			w.scales, w.biases = quant.F32Scales(s), quant.F32Scales(b)
			return err
		}
		var err error
		if w.scales, err = stored(st); err != nil {
			return err
		}
		w.biases, err = stored(bt)
		return err
	}
	if st.DType != safetensors.U8 {
		return fmt.Errorf("tensor %q is %s, want U8 scales for %s", st.Name, st.DType, q.Mode)
	}
	f, err := quant.FPScales(q.Mode, st.Data)
	w.scales = quant.F32Scales(f)
	return err
}

// stored binds affine scales or biases in their checkpoint dtype, in place in the mapping
// (no float32 copy: the kernels widen bf16 and fp16 as they read them).
func stored(t *safetensors.Tensor) (quant.Scales, error) {
	switch t.DType {
	case safetensors.F32:
		return quant.F32Scales(view[float32](t.Data)), nil
	case safetensors.BF16:
		return quant.HalfScales(view[uint16](t.Data), quant.ScaleBF16), nil
	case safetensors.F16:
		return quant.HalfScales(view[uint16](t.Data), quant.ScaleF16), nil
	}
	return quant.Scales{}, fmt.Errorf("tensor %q is %s: scales and biases must be F32, F16 or BF16", t.Name, t.DType)
}

// Vector implements compute.Backend.
func (b *Backend) Vector(src compute.Source, name string) (compute.Vector, error) {
	t, err := compute.VectorTensor(src, name)
	if err != nil {
		return nil, err
	}
	f, err := floats(t)
	return vector(f), err
}

func floats(t *safetensors.Tensor) ([]float32, error) {
	switch t.DType {
	case safetensors.F32, safetensors.F16, safetensors.BF16:
		return t.Float32s()
	}
	return nil, fmt.Errorf("tensor %q is %s: float weights must be F32, F16 or BF16 (quantized layers need a quantization block in config.json)", t.Name, t.DType)
}

// uint32s views little-endian packed codes as []uint32 (view).
func uint32s(b []byte) []uint32 { return view[uint32](b) }

// view reinterprets little-endian bytes as a slice of T without copying (amd64 and arm64
// are little-endian): always on those (ReadsMisaligned), elsewhere only when b is aligned
// for T, a misaligned b being copied into a new aligned slice there.
func view[T uint16 | uint32 | float32](b []byte) []T {
	size := int(unsafe.Sizeof(T(0)))
	n := len(b) / size
	if n == 0 {
		return nil
	}
	if ReadsMisaligned || uintptr(unsafe.Pointer(&b[0]))%uintptr(size) == 0 {
		return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
	}
	out := make([]T, n)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), n*size), b)
	return out
}

// alloc returns a buffer of n floats (contents undefined).
func (b *Backend) alloc(n int) []float32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used[n] = b.serial
	b.live += n
	b.peak = max(b.peak, b.live)
	if l := b.free[n]; len(l) > 0 {
		buf := l[len(l)-1]
		b.free[n] = l[:len(l)-1]
		return buf
	}
	return make([]float32, n)
}

// release returns buffers for reuse, keeping a bounded number per size.
func (b *Backend) release(bufs [][]float32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, buf := range bufs {
		b.live -= len(buf)
		if l := b.free[len(buf)]; len(l) < 64 {
			b.free[len(buf)] = append(l, buf)
		}
	}
}

// ActivationPeak returns the most bytes of activation buffers (each op's result and its scratch) the
// backend's contexts held at once since the last call, and starts the next count from what they hold now:
// what a pass's activations cost, for measuring it (the memory plan's estimates are held to it).
func (b *Backend) ActivationPeak() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.peak
	b.peak = b.live
	return 4 * int64(p)
}

// Recycle takes back a slice that Float32s returned, once the caller is done with it (the
// engine's logits of the previous decode step), so that the next Float32s of its length
// reuses it instead of allocating: 600 KiB a token at Qwen's vocabulary, most of what a
// decode step allocated.
func (b *Backend) Recycle(x []float32) {
	if len(x) > 0 {
		b.release([][]float32{x})
	}
}

func (b *Backend) getSlab() *slab {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := len(b.slabs); n > 0 {
		s := b.slabs[n-1]
		b.slabs = b.slabs[:n-1]
		return s
	}
	return &slab{}
}

func (b *Backend) putSlab(s *slab) {
	s.reset()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.slabs) < 8 {
		b.slabs = append(b.slabs, s)
	}
}

// newSerial numbers a new context.
func (b *Backend) newSerial() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.serial++
	return b.serial
}

// trim drops the kept buffers of every length that no context since serial asked for: a
// prefill's working set (tens of MiB for 512 tokens) goes back to the collector once
// decoding, whose buffers are a few hundred KiB, has taken over, instead of staying in the
// pool for good, and the lengths of one-off prompt remainders do not pile up.
func (b *Backend) trim(serial uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for n := range b.free {
		if b.used[n] < serial {
			delete(b.free, n)
			delete(b.used, n)
		}
	}
}

// pooled is the number of floats kept for reuse (tests).
func (b *Backend) pooled() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	total := 0
	for n, l := range b.free {
		total += n * len(l)
	}
	return total
}

// parallel runs fn over [0, n) split into contiguous ranges on up to b.threads
// goroutines (the caller's and the shared crew's, internal/crew); ranges are at least minChunk long, up to 4
// per goroutine, claimed in turn. Which goroutine computes a range never changes its
// result.
func (b *Backend) parallel(n, minChunk int, fn func(lo, hi int)) {
	minChunk = max(minChunk, 1)
	parts := b.parts(n, minChunk)
	if parts <= 1 {
		fn(0, n)
		return
	}
	crew.Run(n, min(4*parts, n/minChunk), parts-1, fn)
}

func (b *Backend) parts(n, minChunk int) int { return min(b.threads, max(1, n/max(minChunk, 1))) }

// single reports whether parallel(n, minChunk, fn) would call fn(0, n) on the caller's
// goroutine: an op can then skip making the closure, which escapes to the heap (a decode
// step's norms and elementwise ops are all this small).
func (b *Backend) single(n, minChunk int) bool { return b.parts(n, minChunk) <= 1 }
