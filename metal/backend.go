package metal

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/residency"
)

// Backend implements compute.Backend on MLX arrays, on the default stream of one MLX
// device: the Metal GPU on a Mac; on Linux a CUDA GPU when MLX was built with CUDA and
// sees one, else MLX's CPU backend.
//
// Every mlx-c call runs on one goroutine locked to its OS thread (MLX 0.31 keeps streams
// and command encoders per thread), holding the Lib's mutex. A Context only
// records ops in Go; Float32s hands the whole recorded step to that thread at once,
// which builds the MLX graph and evaluates it with one mlx_eval.
//
// Weights are wrapped, not copied, where Metal accepts the checkpoint's mmapped pages
// (newBufferWithBytesNoCopy needs page-aligned memory: each tensor's pages are
// wrapped and the tensor sliced out of them); MLX copies when it refuses. The
// checkpoint must therefore stay open until the Backend is closed: use one Backend per
// loaded model and close it first. compute.Weight has no release of its own, so a
// Backend holds every weight bound on it until Close.
type Backend struct {
	lib    *Lib
	gpu    mlxStream // the stream every op runs on (the CPU's on a machine without a GPU)
	device string    // "metal", "cuda" or "cpu"
	// wide says products run in float32: MLX's CPU backend accumulates fp16 and bf16
	// products in fp16 and bf16 (its GPU backends in float32), which loses several
	// percent over a long dot product, and its gather_mm takes float32 only.
	wide  bool
	info  map[string]string
	calls chan func()
	name  string

	life    sync.RWMutex // held for reading by each call to the worker, for writing by Close
	stopped bool

	mu     sync.Mutex
	owned  []mlxArray // weights and RoPE tables, freed by Close
	freqs  map[*compute.RoPE]mlxArray
	closed bool
	group  *Group    // the distributed group joined or used, if any (JoinGroup, UseGroup)
	comm   mlxStream // the CPU stream its transfers run on

	streams map[*residency.Manager]*streamState // streamed experts by model (stream.go)
	// copiedBytes counts the mapped bytes Metal copied beside their pages (CopiedWeightBytes).
	copiedBytes atomic.Int64
}

// CopiedWeightBytes returns the bytes of mapped weights that MLX copied into memory of its
// own on Metal, the mapped pages staying beside the copy, because the checkpoint stores
// them at an offset that is not a multiple of their element size (tensor): Metal wraps a
// tensor in place only as its pages, and then reads it at an offset within them, which a
// GPU buffer needs aligned for its element type. A checkpoint that MLX's
// save_safetensors wrote, with Gemma 4's two-byte layer_scalar, has such tensors; `mlxg
// create` writes none. 0 on MLX's CPU device, which copies every tensor and drops their
// pages (copied), and on CUDA, which holds its own copy of every weight anyway.
func (b *Backend) CopiedWeightBytes() int64 { return b.copiedBytes.Load() }

// NewBackend starts the MLX worker thread on lib's best device: Metal (required on
// macOS), else CUDA, else MLX's CPU.
func NewBackend(lib *Lib) (*Backend, error) {
	b := &Backend{lib: lib, calls: make(chan func()), freqs: map[*compute.RoPE]mlxArray{}}
	go b.worker()
	if err := b.do(b.open); err != nil {
		close(b.calls)
		return nil, err
	}
	b.name = fmt.Sprintf("%s (MLX %s)", b.Kind(), lib.Version)
	if n := b.info["device_name"]; n != "" {
		b.name = fmt.Sprintf("%s (MLX %s, %s)", b.Kind(), lib.Version, n)
	}
	return b, nil
}

// open picks the device and makes its default stream, on the worker.
func (b *Backend) open() error {
	l := b.lib
	metalOK, err := l.available("mlx_metal_is_available", l.metalIsAvailable)
	if err != nil {
		return err
	}
	cudaOK, err := l.available("mlx_cuda_is_available", l.cudaIsAvailable)
	if err != nil {
		return err
	}
	dev, newStream, op := deviceGPU, l.defaultGPUStream, "mlx_default_gpu_stream_new"
	switch {
	case metalOK:
		b.device = "metal"
	case runtime.GOOS == "darwin":
		return &UnavailableError{Reason: fmt.Errorf("MLX %s at %s reports no Metal GPU", l.Version, l.Path)}
	case cudaOK:
		b.device = "cuda"
	default:
		b.device, dev, newStream, op = "cpu", deviceCPU, l.defaultCPUStream, "mlx_default_cpu_stream_new"
	}
	s, err := handle(op, newStream())
	if err != nil {
		return err
	}
	b.gpu = s
	b.wide = b.device == "cpu"
	b.info, _ = l.deviceInfo(dev) // informational: a library without it still runs
	return nil
}

// Kind is "metal" for MLX on Apple's GPU, "mlx-cuda" or "mlx-cpu" elsewhere.
func (b *Backend) Kind() string {
	if b.device == "metal" {
		return "metal"
	}
	return "mlx-" + b.device
}

// Device is the MLX device the backend runs on: "metal", "cuda" or "cpu".
func (b *Backend) Device() string { return b.device }

func (b *Backend) worker() {
	runtime.LockOSThread()
	for fn := range b.calls {
		fn()
	}
}

// errClosed is what a call on a closed Backend returns.
var errClosed = errors.New("metal: the backend is closed")

// do runs fn on the worker thread with the Lib's mutex held.
func (b *Backend) do(fn func() error) error {
	b.life.RLock()
	defer b.life.RUnlock()
	if b.stopped {
		return errClosed
	}
	return b.run(fn)
}

func (b *Backend) run(fn func() error) error {
	done := make(chan error, 1)
	b.calls <- func() {
		b.lib.mu.Lock()
		defer b.lib.mu.Unlock()
		done <- fn()
	}
	return <-done
}

// graph runs build on the worker with a fresh graph; arrays build did not keep are
// freed when it returns.
func (b *Backend) graph(build func(g *graph) error) error {
	return b.do(func() error {
		g := &graph{l: b.lib, s: b.gpu}
		defer g.free()
		err := build(g)
		if err == nil {
			err = g.err
		}
		return err
	})
}

// Name implements compute.Backend.
func (b *Backend) Name() string { return b.name }

// Lib returns the library the backend runs on.
func (b *Backend) Lib() *Lib { return b.lib }

// Close frees the weights, caches and stream and stops the worker. Contexts must be
// closed first.
func (b *Backend) Close() error {
	b.life.Lock()
	defer b.life.Unlock()
	if b.stopped {
		return nil
	}
	b.stopped = true
	b.mu.Lock()
	b.closed = true
	owned, streams := b.owned, b.streams
	b.owned, b.freqs, b.streams = nil, nil, nil
	b.mu.Unlock()
	err := b.run(func() error {
		limErr := b.releasePlan()
		for _, a := range owned {
			b.lib.arrayFree(a)
		}
		for _, st := range streams {
			st.free(b.lib)
		}
		return errors.Join(limErr, status("mlx_stream_free", b.lib.streamFree(b.gpu)))
	})
	close(b.calls)
	return err
}

// weight is a bound matrix: float in the checkpoint's dtype, or packed codes with
// scales (and biases in affine mode).
type weight struct {
	name              string
	out, in           int
	q                 compute.Quant
	w, scales, biases mlxArray
	bias              mlxArray  // float32 [out], or null
	dt                mlxDtype  // the dtype activations are cast to for the product
	stream            *streamed // experts read through a residency manager: no arrays (stream.go)
}

func (w *weight) Dims() (int, int)     { return w.out, w.in }
func (w *weight) Quant() compute.Quant { return w.q }

type vector struct {
	n int
	a mlxArray // float32
}

func (v *vector) Len() int { return v.n }

var dtypes = map[safetensors.DType]mlxDtype{
	safetensors.F32: dtFloat32, safetensors.F16: dtFloat16, safetensors.BF16: dtBfloat16,
	safetensors.U32: dtUint32, safetensors.U8: dtUint8, safetensors.I32: dtInt32,
}

// zeroCopyMin is the smallest tensor worth wrapping rather than copying.
const zeroCopyMin = 1 << 16

// mapped reports whether src's tensors live in a checkpoint's read-only mmap, which
// stays put until the checkpoint is closed: a checkpoint, or a streaming model's
// (whose tensors are its checkpoint's, Locate saying where). Other sources (Go memory,
// which the GC may free) are always copied.
func mapped(src compute.Source) bool {
	switch s := src.(type) {
	case *safetensors.Checkpoint, *safetensors.File, compute.StreamSource:
		return true
	case interface{ MappedSource() bool }: // parts of a fused weight (model.Loader.LinearRows)
		return s.MappedSource()
	}
	return false
}

// tensor makes an array over t's bytes, wrapping the mmapped pages when wrap is set
// and the tensor is large.
//
// The pages are wrapped as a 1-D array of t's own dtype, not of bytes: MLX's
// dimensions are int32, and counting elements keeps a tensor of up to 2³¹ elements
// (a bf16 embedding of 2.8 GB, say) in one dimension. A tensor whose offset is not a
// multiple of its element size, or whose pages hold more elements than an int32
// counts, is handed to MLX at its own address and shape instead, and MLX copies it into
// memory of its own (Metal wraps without a copy only page-aligned memory; MLX's CPU
// device wraps none, copying every tensor, which is why copied drops the pages there).
func (b *Backend) tensor(g *graph, t *safetensors.Tensor, wrap bool) mlxArray {
	dt, ok := dtypes[t.DType]
	if !ok {
		return g.fail(fmt.Errorf("tensor %q has dtype %s, which the Metal backend does not load (F32, F16, BF16, U32, U8, I32)", t.Name, t.DType))
	}
	if len(t.Data) == 0 {
		return g.fail(fmt.Errorf("tensor %q is empty", t.Name))
	}
	for _, d := range t.Shape {
		if d > math.MaxInt32 {
			return g.fail(fmt.Errorf("tensor %q has a dimension of %d, over MLX's limit of 2³¹-1", t.Name, d))
		}
	}
	p := unsafe.Pointer(&t.Data[0])
	if !wrap || len(t.Data) < zeroCopyMin {
		return g.fromData(p, dt, t.Shape...)
	}
	size := t.DType.Size()
	page := uintptr(os.Getpagesize())
	start := uintptr(p) &^ (page - 1)
	end := (uintptr(p) + uintptr(len(t.Data)) + page - 1) &^ (page - 1)
	off := uintptr(p) - start
	if size <= 0 || off%uintptr(size) != 0 || (end-start)/uintptr(size) > math.MaxInt32 {
		a := b.wrapAt(g, t, p, dt)
		if size > 0 && off%uintptr(size) != 0 && b.device == "metal" {
			b.copiedBytes.Add(int64(len(t.Data)))
		}
		b.copied(p, len(t.Data))
		return a
	}
	base := unsafe.Add(p, -int(off)) // the page holding the tensor's first byte
	a := g.wrap(base, int((end-start)/uintptr(size)), int(off)/size, len(t.Data)/size, dt)
	b.copied(p, len(t.Data))
	return g.reshape(a, t.Shape...)
}

// copied releases the mmapped pages of a tensor MLX has just copied (only its CPU
// backend copies: Metal and CUDA use the pages or their own transfer).
func (b *Backend) copied(p unsafe.Pointer, n int) {
	if b.device == "cpu" {
		dropPages(p, n)
	}
}

// wrapAt hands MLX the tensor at its own address and shape, without copying it here.
func (b *Backend) wrapAt(g *graph, t *safetensors.Tensor, p unsafe.Pointer, dt mlxDtype) mlxArray {
	sp, n := ints(t.Shape)
	a, err := handle("mlx_array_new_data_managed", b.lib.arrayNewDataMgd(p, sp, int32(n), dt, b.lib.noop))
	if err != nil {
		return g.fail(fmt.Errorf("tensor %q: %w", t.Name, err))
	}
	return g.own(a)
}

// bind evaluates arrays so they no longer hold their construction graph and hands
// them to the backend.
func (b *Backend) bind(g *graph, as ...mlxArray) {
	g.eval(as...)
	if g.err != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range as {
		if a != 0 {
			b.owned = append(b.owned, g.keep(a))
		}
	}
}

// Weight implements compute.Backend.
func (b *Backend) Weight(src compute.Source, prefix string, q compute.Quant) (compute.Weight, error) {
	name := prefix + ".weight"
	// A stack of expert matrices (or a conv1d kernel) is bound as one matrix of its
	// rows; MoE views it as a stack again.
	t, rows, cols, err := compute.Matrix(src, prefix)
	if err != nil {
		return nil, err
	}
	w := &weight{name: prefix, out: rows, in: cols, q: q, dt: dtypes[t.DType]}
	var scales, biases, bias *safetensors.Tensor
	var ok bool
	if q.Quantized() {
		if err := checkQuant(q, prefix); err != nil {
			return nil, err
		}
		if t.DType != safetensors.U32 {
			return nil, fmt.Errorf("tensor %q is %s, but the config says the layer is %d-bit quantized (packed U32 codes expected)", name, t.DType, q.Bits)
		}
		w.in = cols * 32 / q.Bits
		groups := int64(w.out) * int64(w.in) / int64(q.GroupSize)
		if scales, ok = src.Tensor(prefix + ".scales"); !ok {
			return nil, fmt.Errorf("checkpoint has no tensor %q for quantized layer %q", prefix+".scales", prefix)
		}
		if scales.NumElements() != groups {
			return nil, fmt.Errorf("tensor %q has %d values, want %d for a %d×%d matrix in groups of %d", scales.Name, scales.NumElements(), groups, w.out, w.in, q.GroupSize)
		}
		w.dt = dtypes[scales.DType]
		if q.Mode == quant.Affine {
			if biases, ok = src.Tensor(prefix + ".biases"); !ok {
				return nil, fmt.Errorf("checkpoint has no tensor %q for affine-quantized layer %q", prefix+".biases", prefix)
			}
			if biases.NumElements() != groups {
				return nil, fmt.Errorf("tensor %q has %d values, want %d", biases.Name, biases.NumElements(), groups)
			}
		} else {
			w.dt = dtFloat32 // float modes keep uint8 scales: activations stay float32
		}
	} else if t.DType != safetensors.F32 && t.DType != safetensors.F16 && t.DType != safetensors.BF16 {
		return nil, fmt.Errorf("tensor %q is %s: float weights must be F32, F16 or BF16 (quantized layers need a quantization block in config.json)", name, t.DType)
	}
	if bt, ok := src.Tensor(prefix + ".bias"); ok {
		if bt.NumElements() != int64(w.out) {
			return nil, fmt.Errorf("tensor %q has %d values for a layer with %d outputs", bt.Name, bt.NumElements(), w.out)
		}
		bias = bt
	}
	if b.wide {
		w.dt = dtFloat32
	}
	if ok, err := b.bindStream(src, t, scales, biases, bias, w); ok || err != nil {
		if err != nil {
			return nil, fmt.Errorf("binding %q on Metal: %w", prefix, err)
		}
		return w, nil
	}
	wrap := mapped(src)
	err = b.graph(func(g *graph) error {
		matrix := func(t *safetensors.Tensor) mlxArray {
			a := b.tensor(g, t, wrap)
			if len(t.Shape) == 3 {
				a = g.reshape(a, t.Shape[0]*t.Shape[1], t.Shape[2])
			}
			return a
		}
		// Where products run in float32 (b.wide), affine scales and biases and float
		// weights are kept in float32: a 4-bit g64 layer grows by 1/9, an fp16 one doubles
		// (MLX's CPU would otherwise widen the matrix at every product).
		widen := func(a mlxArray) mlxArray {
			if b.wide {
				return g.astype(a, dtFloat32)
			}
			return a
		}
		w.w = matrix(t)
		if !q.Quantized() {
			w.w = widen(w.w) // else every product would widen the whole matrix again
		}
		arrays := []mlxArray{w.w}
		if scales != nil {
			w.scales = matrix(scales)
			if biases != nil {
				w.scales = widen(w.scales)
			}
			arrays = append(arrays, w.scales)
		}
		if biases != nil {
			w.biases = widen(matrix(biases))
			arrays = append(arrays, w.biases)
		}
		if bias != nil {
			w.bias = g.reshape(g.astype(b.tensor(g, bias, wrap), dtFloat32), w.out)
			arrays = append(arrays, w.bias)
		}
		b.bind(g, arrays...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("binding %q on Metal: %w", prefix, err)
	}
	return w, nil
}

func checkQuant(q compute.Quant, prefix string) error {
	if q.Mode == quant.Affine {
		if err := quant.CheckAffine(q.Bits, q.GroupSize); err != nil {
			return fmt.Errorf("layer %q: %w", prefix, err)
		}
		return nil
	}
	bits, group, err := quant.FPParams(q.Mode)
	if err != nil {
		return fmt.Errorf("layer %q: %w", prefix, err)
	}
	if q.Bits != bits || q.GroupSize != group {
		return fmt.Errorf("layer %q: %s quantization is %d bits in groups of %d, the config says %d bits in groups of %d", prefix, q.Mode, bits, group, q.Bits, q.GroupSize)
	}
	return nil
}

// Vector implements compute.Backend.
func (b *Backend) Vector(src compute.Source, name string) (compute.Vector, error) {
	t, err := compute.VectorTensor(src, name)
	if err != nil {
		return nil, err
	}
	if t.DType != safetensors.F32 && t.DType != safetensors.F16 && t.DType != safetensors.BF16 {
		return nil, fmt.Errorf("tensor %q is %s: a norm weight must be F32, F16 or BF16", name, t.DType)
	}
	v := &vector{n: t.Shape[0]}
	err = b.graph(func(g *graph) error {
		v.a = g.astype(b.tensor(g, t, mapped(src)), dtFloat32)
		b.bind(g, v.a)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("binding %q on Metal: %w", name, err)
	}
	return v, nil
}

// ropeFreqs returns MLX's per-frequency periods for r (1/inv_freq), made once.
func (b *Backend) ropeFreqs(g *graph, r *compute.RoPE) mlxArray {
	b.mu.Lock()
	f, ok := b.freqs[r]
	b.mu.Unlock()
	if ok {
		return f
	}
	periods := make([]float32, len(r.InvFreq))
	for i, inv := range r.InvFreq {
		periods[i] = 1 / inv
	}
	f = g.fromFloat32s(periods, len(periods))
	if g.err != nil {
		return 0
	}
	b.mu.Lock()
	b.freqs[r] = g.keep(f)
	b.owned = append(b.owned, f)
	b.mu.Unlock()
	return f
}

// layerKey identifies a kvstore.Layer by the address it points at, so that the map
// of device-side caches does not keep the layer alive.
func layerKey(l kvstore.Layer) uintptr {
	type iface struct{ typ, data unsafe.Pointer }
	return uintptr((*iface)(unsafe.Pointer(&l)).data)
}
