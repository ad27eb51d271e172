package metal

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/mlxg/mlxg/internal/half"
	"github.com/mlxg/mlxg/internal/quant"
)

// emu is a small eager model of the part of mlx-c the backend calls, written from
// MLX's documented semantics (shapes, broadcasting, type promotion, fp16/bf16
// rounding, rope's periods, sdpa's lower-right causal mask and grouped heads,
// quantized_matmul's packing along the last axis). Its functions are installed as a
// Lib's api, so the backend's graph construction, layouts and KV bookkeeping run and
// are checked on Linux. It is no evidence about MLX itself: that takes `mlxg doctor`
// on a Mac.
type emu struct {
	mu     sync.Mutex
	next   uintptr
	arrays map[mlxArray]*earr
	vecs   map[mlxVectorArray][]mlxArray
	evals  int // mlx_eval calls
	errMsg string
}

type earr struct {
	shape []int
	dt    mlxDtype
	v     []float64
	sh32  []int32   // kept alive for mlx_array_shape
	f32   []float32 // kept alive for mlx_array_data_float32
}

func newEmu() *emu {
	return &emu{next: 100, arrays: map[mlxArray]*earr{}, vecs: map[mlxVectorArray][]mlxArray{}}
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// round gives v the precision of dt.
func round(v float64, dt mlxDtype) float64 {
	switch dt {
	case dtFloat16:
		return float64(half.F16ToF32(half.F32ToF16(float32(v))))
	case dtBfloat16:
		return float64(half.BF16ToF32(half.F32ToBF16(float32(v))))
	case dtFloat32:
		return float64(float32(v))
	case dtBool:
		if v != 0 {
			return 1
		}
		return 0
	case dtUint8, dtUint32, dtInt32:
		return math.Trunc(v)
	}
	return v
}

func isFloat(dt mlxDtype) bool { return dt == dtFloat16 || dt == dtBfloat16 || dt == dtFloat32 }

// promote is MLX's result type of a binary op over the dtypes used here.
func promote(a, b mlxDtype) mlxDtype {
	switch {
	case a == b:
		return a
	case isFloat(a) && isFloat(b):
		return dtFloat32 // f16 with bf16, or either with f32
	case isFloat(a):
		return a
	case isFloat(b):
		return b
	}
	return max(a, b)
}

func (e *emu) put(a *earr) mlxArray {
	e.next++
	h := mlxArray(e.next)
	for i := range a.v {
		a.v[i] = round(a.v[i], a.dt)
	}
	e.arrays[h] = a
	return h
}

func (e *emu) get(h mlxArray) *earr {
	a, ok := e.arrays[h]
	if !ok {
		panic(fmt.Sprintf("emu: use of array handle %d, which is not live", h))
	}
	return a
}

// fail records an error as mlx-c's handler would receive it.
func (e *emu) fail(format string, args ...any) int32 {
	msg := append([]byte(fmt.Sprintf(format, args...)), 0)
	handleError(&msg[0], nil)
	return 1
}

func (e *emu) live() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.arrays)
}

// strides of a row-major shape.
func strides(shape []int) []int {
	s := make([]int, len(shape))
	n := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = n
		n *= shape[i]
	}
	return s
}

// bshape is the broadcast of shapes, or an error.
func bshape(shapes ...[]int) ([]int, error) {
	n := 0
	for _, s := range shapes {
		n = max(n, len(s))
	}
	out := make([]int, n)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		for i, d := range s {
			j := n - len(s) + i
			switch {
			case out[j] == 1:
				out[j] = d
			case d != 1 && d != out[j]:
				return nil, fmt.Errorf("shapes %v cannot be broadcast", shapes)
			}
		}
	}
	return out, nil
}

// indexer maps a flat index of out to the flat index of an array of shape in
// broadcast against it.
func indexer(out, in []int) func(int) int {
	st := strides(in)
	os := strides(out)
	bs := make([]int, len(out))
	for i := range in {
		j := len(out) - len(in) + i
		if in[i] != 1 {
			bs[j] = st[i]
		}
	}
	return func(flat int) int {
		off := 0
		for j := range out {
			off += (flat / os[j] % out[j]) * bs[j]
		}
		return off
	}
}

func (e *emu) nary(res *mlxArray, dt mlxDtype, fn func(x []float64) float64, hs ...mlxArray) int32 {
	var shapes [][]int
	var as []*earr
	for _, h := range hs {
		a := e.get(h)
		as = append(as, a)
		shapes = append(shapes, a.shape)
	}
	out, err := bshape(shapes...)
	if err != nil {
		return e.fail("%v", err)
	}
	idx := make([]func(int) int, len(as))
	for i, a := range as {
		idx[i] = indexer(out, a.shape)
	}
	v := make([]float64, numel(out))
	x := make([]float64, len(as))
	for f := range v {
		for i, a := range as {
			x[i] = a.v[idx[i](f)]
		}
		v[f] = fn(x)
	}
	*res = e.put(&earr{shape: out, dt: dt, v: v})
	return 0
}

func (e *emu) binary(fn func(a, b float64) float64) func(*mlxArray, mlxArray, mlxArray, mlxStream) int32 {
	return func(res *mlxArray, a, b mlxArray, _ mlxStream) int32 {
		e.mu.Lock()
		defer e.mu.Unlock()
		dt := promote(e.get(a).dt, e.get(b).dt)
		return e.nary(res, dt, func(x []float64) float64 { return fn(x[0], x[1]) }, a, b)
	}
}

func (e *emu) transposed(a *earr, perm []int) *earr {
	shape := make([]int, len(perm))
	for i, p := range perm {
		shape[i] = a.shape[p]
	}
	st, os := strides(a.shape), strides(shape)
	v := make([]float64, len(a.v))
	for f := range v {
		off := 0
		for i := range shape {
			off += (f / os[i] % shape[i]) * st[perm[i]]
		}
		v[f] = a.v[off]
	}
	return &earr{shape: shape, dt: a.dt, v: v}
}

// matmul of [..., M, K] by [..., K, N] with broadcast batch dims.
func (e *emu) matmul(a, b *earr, dt mlxDtype) (*earr, error) {
	if len(a.shape) < 2 || len(b.shape) < 2 {
		return nil, fmt.Errorf("matmul needs matrices, got %v and %v", a.shape, b.shape)
	}
	M, K := a.shape[len(a.shape)-2], a.shape[len(a.shape)-1]
	K2, N := b.shape[len(b.shape)-2], b.shape[len(b.shape)-1]
	if K != K2 {
		return nil, fmt.Errorf("[matmul] inner dimensions %v and %v differ", a.shape, b.shape)
	}
	batch, err := bshape(a.shape[:len(a.shape)-2], b.shape[:len(b.shape)-2])
	if err != nil {
		return nil, err
	}
	ia, ib := indexer(batch, a.shape[:len(a.shape)-2]), indexer(batch, b.shape[:len(b.shape)-2])
	out := &earr{shape: append(append([]int(nil), batch...), M, N), dt: dt, v: make([]float64, numel(batch)*M*N)}
	for bi := 0; bi < numel(batch); bi++ {
		ao, bo, oo := ia(bi)*M*K, ib(bi)*K*N, bi*M*N
		for m := 0; m < M; m++ {
			for n := 0; n < N; n++ {
				var s float64
				for k := 0; k < K; k++ {
					s += a.v[ao+m*K+k] * b.v[bo+k*N+n]
				}
				out.v[oo+m*N+n] = s
			}
		}
	}
	return out, nil
}

// dequant expands w (codes packed along its last axis) with scales and biases
// (nil for the float modes) to float64 values of shape [..., cols].
func dequant(w, scales, biases *earr, group, bits int, mode string) (*earr, error) {
	wpr := w.shape[len(w.shape)-1]
	cols := wpr * 32 / bits
	rows := len(w.v) / wpr
	if len(scales.v) != rows*cols/group || (biases != nil && len(biases.v) != len(scales.v)) {
		return nil, fmt.Errorf("[dequantize] scales of shape %v do not fit codes of shape %v in groups of %d", scales.shape, w.shape, group)
	}
	out := &earr{shape: append(append([]int(nil), w.shape[:len(w.shape)-1]...), cols), v: make([]float64, rows*cols)}
	packed := make([]uint32, wpr)
	sc, bi := make([]float32, cols/group), make([]float32, cols/group)
	row := make([]float32, cols)
	for r := 0; r < rows; r++ {
		for i := range packed {
			packed[i] = uint32(w.v[r*wpr+i])
		}
		for g := range sc {
			sc[g] = float32(scales.v[r*len(sc)+g])
			if biases != nil {
				bi[g] = float32(biases.v[r*len(sc)+g])
			}
		}
		if mode == "affine" {
			quant.DequantizeRow(row, packed, sc, bi, bits, group)
		} else {
			raw := make([]uint8, len(sc))
			for g := range raw {
				raw[g] = uint8(scales.v[r*len(sc)+g])
			}
			fs, err := quant.FPScales(quant.Mode(mode), raw)
			if err != nil {
				return nil, err
			}
			quant.DequantizeFPRow(row, packed, fs, bits, group)
		}
		for i, x := range row {
			out.v[r*cols+i] = float64(x)
		}
	}
	return out, nil
}

func bytesOf(a *earr) []byte {
	size := map[mlxDtype]int{dtUint8: 1, dtFloat16: 2, dtBfloat16: 2, dtFloat32: 4, dtUint32: 4, dtInt32: 4}[a.dt]
	b := make([]byte, len(a.v)*size)
	for i, x := range a.v {
		switch a.dt {
		case dtUint8:
			b[i] = uint8(x)
		case dtFloat16:
			*(*uint16)(unsafe.Pointer(&b[2*i])) = half.F32ToF16(float32(x))
		case dtBfloat16:
			*(*uint16)(unsafe.Pointer(&b[2*i])) = half.F32ToBF16(float32(x))
		case dtFloat32:
			*(*float32)(unsafe.Pointer(&b[4*i])) = float32(x)
		case dtUint32:
			*(*uint32)(unsafe.Pointer(&b[4*i])) = uint32(x)
		case dtInt32:
			*(*int32)(unsafe.Pointer(&b[4*i])) = int32(x)
		}
	}
	return b
}

func fromBytes(b []byte, dt mlxDtype) []float64 {
	size := map[mlxDtype]int{dtUint8: 1, dtFloat16: 2, dtBfloat16: 2, dtFloat32: 4, dtUint32: 4, dtInt32: 4}[dt]
	v := make([]float64, len(b)/size)
	for i := range v {
		p := unsafe.Pointer(&b[i*size])
		switch dt {
		case dtUint8:
			v[i] = float64(b[i])
		case dtFloat16:
			v[i] = float64(half.F16ToF32(*(*uint16)(p)))
		case dtBfloat16:
			v[i] = float64(half.BF16ToF32(*(*uint16)(p)))
		case dtFloat32:
			v[i] = float64(*(*float32)(p))
		case dtUint32:
			v[i] = float64(*(*uint32)(p))
		case dtInt32:
			v[i] = float64(*(*int32)(p))
		}
	}
	return v
}

func goInts(p *int32, n uintptr) []int {
	if n == 0 {
		return nil
	}
	out := make([]int, n)
	for i, v := range unsafe.Slice(p, n) {
		out[i] = int(v)
	}
	return out
}

func normAxis(axis, n int) int {
	if axis < 0 {
		return axis + n
	}
	return axis
}

// lib returns a Lib whose functions are e's.
func (e *emu) lib() *Lib {
	l := &Lib{Path: "emulated", Version: "emu", ABI: "0.5"}
	lock := func() func() { e.mu.Lock(); return e.mu.Unlock }
	l.arrayNew = func() mlxArray { return 0 }
	l.arrayFree = func(a mlxArray) int32 {
		defer lock()()
		if a != 0 {
			e.get(a)
			delete(e.arrays, a)
		}
		return 0
	}
	newData := func(p unsafe.Pointer, shape *int32, dim int32, dt mlxDtype) mlxArray {
		defer lock()()
		sh := goInts(shape, uintptr(dim))
		size := map[mlxDtype]int{dtUint8: 1, dtFloat16: 2, dtBfloat16: 2, dtFloat32: 4, dtUint32: 4, dtInt32: 4}[dt]
		b := unsafe.Slice((*byte)(p), numel(sh)*size)
		return e.put(&earr{shape: sh, dt: dt, v: fromBytes(b, dt)})
	}
	l.arrayNewData = newData
	l.arrayNewDataMgd = func(p unsafe.Pointer, shape *int32, dim int32, dt mlxDtype, _ uintptr) mlxArray {
		return newData(p, shape, dim, dt)
	}
	l.arrayNewFloat = func(v float32) mlxArray {
		defer lock()()
		return e.put(&earr{dt: dtFloat32, v: []float64{float64(v)}})
	}
	l.arrayNewInt = func(v int32) mlxArray {
		defer lock()()
		return e.put(&earr{dt: dtInt32, v: []float64{float64(v)}})
	}
	l.arrayNdim = func(a mlxArray) uintptr { defer lock()(); return uintptr(len(e.get(a).shape)) }
	l.arrayShape = func(a mlxArray) *int32 {
		defer lock()()
		x := e.get(a)
		x.sh32 = make([]int32, len(x.shape)+1)
		for i, d := range x.shape {
			x.sh32[i] = int32(d)
		}
		return &x.sh32[0]
	}
	l.arrayDtype = func(a mlxArray) mlxDtype { defer lock()(); return e.get(a).dt }
	l.arraySize = func(a mlxArray) uintptr { defer lock()(); return uintptr(len(e.get(a).v)) }
	l.arrayDataFloat32 = func(a mlxArray) unsafe.Pointer {
		defer lock()()
		x := e.get(a)
		if x.dt != dtFloat32 {
			e.fail("mlx_array_data_float32 of a %d array", x.dt)
			return nil
		}
		x.f32 = make([]float32, len(x.v)+1)
		for i, v := range x.v {
			x.f32[i] = float32(v)
		}
		return unsafe.Pointer(&x.f32[0])
	}
	l.vectorArrayNew = func() mlxVectorArray {
		defer lock()()
		e.next++
		v := mlxVectorArray(e.next)
		e.vecs[v] = nil
		return v
	}
	l.vectorArrayFree = func(v mlxVectorArray) int32 {
		defer lock()()
		for _, a := range e.vecs[v] {
			delete(e.arrays, a)
		}
		delete(e.vecs, v)
		return 0
	}
	l.vectorArrayAppend = func(v mlxVectorArray, a mlxArray) int32 {
		defer lock()()
		x := *e.get(a) // the vector holds its own reference
		e.vecs[v] = append(e.vecs[v], e.put(&x))
		return 0
	}
	l.vectorArraySize = func(v mlxVectorArray) uintptr { defer lock()(); return uintptr(len(e.vecs[v])) }
	l.vectorArrayGet = func(res *mlxArray, v mlxVectorArray, i uintptr) int32 {
		defer lock()()
		x := *e.get(e.vecs[v][i])
		*res = e.put(&x)
		return 0
	}
	l.eval = func(v mlxVectorArray) int32 { defer lock()(); e.evals++; return 0 }
	l.metalIsAvailable = func(res *bool) int32 { *res = true; return 0 }
	l.defaultGPUStream = func() mlxStream { return 1 }
	l.streamFree = func(mlxStream) int32 { return 0 }
	l.deviceNewType = func(mlxDeviceType, int32) mlxDevice { return 1 }
	l.deviceFree = func(mlxDevice) int32 { return 0 }
	l.deviceInfoNew = func() mlxDeviceInfo { return 1 }
	l.deviceInfoGet = func(*mlxDeviceInfo, mlxDevice) int32 { return 0 }
	l.deviceInfoFree = func(mlxDeviceInfo) int32 { return 0 }
	l.deviceInfoHasKey = func(res *bool, _ mlxDeviceInfo, _ string) int32 { *res = false; return 0 }

	l.add = e.binary(func(a, b float64) float64 { return a + b })
	l.multiply = e.binary(func(a, b float64) float64 { return a * b })
	l.greater = func(res *mlxArray, a, b mlxArray, _ mlxStream) int32 {
		defer lock()()
		return e.nary(res, dtBool, func(x []float64) float64 {
			if x[0] > x[1] {
				return 1
			}
			return 0
		}, a, b)
	}
	l.where = func(res *mlxArray, c, x, y mlxArray, _ mlxStream) int32 {
		defer lock()()
		return e.nary(res, promote(e.get(x).dt, e.get(y).dt), func(v []float64) float64 {
			if v[0] != 0 {
				return v[1]
			}
			return v[2]
		}, c, x, y)
	}
	l.sigmoid = func(res *mlxArray, a mlxArray, _ mlxStream) int32 {
		defer lock()()
		return e.nary(res, e.get(a).dt, func(x []float64) float64 { return 1 / (1 + math.Exp(-x[0])) }, a)
	}
	l.astype = func(res *mlxArray, a mlxArray, dt mlxDtype, _ mlxStream) int32 {
		defer lock()()
		return e.nary(res, dt, func(x []float64) float64 { return x[0] }, a)
	}
	l.contiguous = func(res *mlxArray, a mlxArray, _ bool, _ mlxStream) int32 {
		defer lock()()
		return e.nary(res, e.get(a).dt, func(x []float64) float64 { return x[0] }, a)
	}
	l.broadcastTo = func(res *mlxArray, a mlxArray, shape *int32, n uintptr, _ mlxStream) int32 {
		defer lock()()
		x := e.get(a)
		out := goInts(shape, n)
		if b, err := bshape(x.shape, out); err != nil || numel(b) != numel(out) {
			return e.fail("[broadcast_to] %v to %v", x.shape, out)
		}
		idx := indexer(out, x.shape)
		v := make([]float64, numel(out))
		for f := range v {
			v[f] = x.v[idx(f)]
		}
		*res = e.put(&earr{shape: out, dt: x.dt, v: v})
		return 0
	}
	l.reshape = func(res *mlxArray, a mlxArray, shape *int32, n uintptr, _ mlxStream) int32 {
		defer lock()()
		x := e.get(a)
		out := goInts(shape, n)
		if numel(out) != len(x.v) {
			return e.fail("[reshape] Cannot reshape array of size %d into shape %v.", len(x.v), out)
		}
		*res = e.put(&earr{shape: out, dt: x.dt, v: append([]float64(nil), x.v...)})
		return 0
	}
	l.transposeAxes = func(res *mlxArray, a mlxArray, axes *int32, n uintptr, _ mlxStream) int32 {
		defer lock()()
		x := e.get(a)
		perm := goInts(axes, n)
		if len(perm) != len(x.shape) {
			return e.fail("[transpose] %d axes for an array of %d dimensions", len(perm), len(x.shape))
		}
		*res = e.put(e.transposed(x, perm))
		return 0
	}
	l.expandDims = func(res *mlxArray, a mlxArray, axis int32, _ mlxStream) int32 {
		defer lock()()
		x := e.get(a)
		ax := normAxis(int(axis), len(x.shape)+1)
		shape := append(append(append([]int(nil), x.shape[:ax]...), 1), x.shape[ax:]...)
		*res = e.put(&earr{shape: shape, dt: x.dt, v: append([]float64(nil), x.v...)})
		return 0
	}
	l.view = func(res *mlxArray, a mlxArray, dt mlxDtype, _ mlxStream) int32 {
		defer lock()()
		x := e.get(a)
		b := bytesOf(x)
		v := fromBytes(b, dt)
		shape := append([]int(nil), x.shape...)
		if len(shape) > 0 {
			shape[len(shape)-1] = len(v) / max(numel(shape[:len(shape)-1]), 1)
		}
		*res = e.put(&earr{shape: shape, dt: dt, v: v})
		return 0
	}
	l.matmul = func(res *mlxArray, a, b mlxArray, _ mlxStream) int32 {
		defer lock()()
		x, y := e.get(a), e.get(b)
		out, err := e.matmul(x, y, promote(x.dt, y.dt))
		if err != nil {
			return e.fail("%v", err)
		}
		*res = e.put(out)
		return 0
	}
	l.takeAxis = func(res *mlxArray, a, idx mlxArray, axis int32, _ mlxStream) int32 {
		defer lock()()
		x, ix := e.get(a), e.get(idx)
		if axis != 0 {
			return e.fail("emu: take_axis only along axis 0")
		}
		row := len(x.v) / x.shape[0]
		out := &earr{shape: append(append([]int(nil), ix.shape...), x.shape[1:]...), dt: x.dt}
		for _, i := range ix.v {
			out.v = append(out.v, x.v[int(i)*row:(int(i)+1)*row]...)
		}
		*res = e.put(out)
		return 0
	}
	l.softmaxAxis = func(res *mlxArray, a mlxArray, axis int32, _ bool, _ mlxStream) int32 {
		defer lock()()
		x := e.get(a)
		if normAxis(int(axis), len(x.shape)) != len(x.shape)-1 {
			return e.fail("emu: softmax only along the last axis")
		}
		n := x.shape[len(x.shape)-1]
		out := &earr{shape: append([]int(nil), x.shape...), dt: x.dt, v: make([]float64, len(x.v))}
		for r := 0; r < len(x.v); r += n {
			m := math.Inf(-1)
			for _, v := range x.v[r : r+n] {
				m = max(m, v)
			}
			var s float64
			for i, v := range x.v[r : r+n] {
				out.v[r+i] = math.Exp(v - m)
				s += out.v[r+i]
			}
			for i := range out.v[r : r+n] {
				out.v[r+i] /= s
			}
		}
		*res = e.put(out)
		return 0
	}
	l.arange = func(res *mlxArray, start, stop, step float64, dt mlxDtype, _ mlxStream) int32 {
		defer lock()()
		out := &earr{dt: dt}
		for v := start; v < stop; v += step {
			out.v = append(out.v, v)
		}
		out.shape = []int{len(out.v)}
		*res = e.put(out)
		return 0
	}
	region := func(x *earr, start, stop []int) ([]int, func(func(src, dst int))) {
		shape := make([]int, len(x.shape))
		for i := range shape {
			shape[i] = stop[i] - start[i]
		}
		st, os := strides(x.shape), strides(shape)
		return shape, func(fn func(src, dst int)) {
			for f := 0; f < numel(shape); f++ {
				off := 0
				for i := range shape {
					off += (f/os[i]%shape[i] + start[i]) * st[i]
				}
				fn(off, f)
			}
		}
	}
	checkRegion := func(op string, x *earr, start, stop []int) int32 {
		if len(start) != len(x.shape) || len(stop) != len(x.shape) {
			return e.fail("[%s] %d starts for an array of shape %v", op, len(start), x.shape)
		}
		for i := range start {
			if start[i] < 0 || stop[i] > x.shape[i] || start[i] > stop[i] {
				return e.fail("[%s] %v..%v outside shape %v", op, start, stop, x.shape)
			}
		}
		return 0
	}
	l.slice = func(res *mlxArray, a mlxArray, start *int32, ns uintptr, stop *int32, ne uintptr, st *int32, nst uintptr, _ mlxStream) int32 {
		defer lock()()
		x := e.get(a)
		s, t := goInts(start, ns), goInts(stop, ne)
		for _, v := range goInts(st, nst) {
			if v != 1 {
				return e.fail("emu: strided slices")
			}
		}
		if rc := checkRegion("slice", x, s, t); rc != 0 {
			return rc
		}
		shape, each := region(x, s, t)
		out := &earr{shape: shape, dt: x.dt, v: make([]float64, numel(shape))}
		each(func(src, dst int) { out.v[dst] = x.v[src] })
		*res = e.put(out)
		return 0
	}
	l.sliceUpdate = func(res *mlxArray, a, upd mlxArray, start *int32, ns uintptr, stop *int32, ne uintptr, _ *int32, _ uintptr, _ mlxStream) int32 {
		defer lock()()
		x, u := e.get(a), e.get(upd)
		s, t := goInts(start, ns), goInts(stop, ne)
		if rc := checkRegion("slice_update", x, s, t); rc != 0 {
			return rc
		}
		shape, each := region(x, s, t)
		if fmt.Sprint(shape) != fmt.Sprint(u.shape) {
			return e.fail("[slice_update] update of shape %v into a region of shape %v", u.shape, shape)
		}
		out := &earr{shape: append([]int(nil), x.shape...), dt: x.dt, v: append([]float64(nil), x.v...)}
		each(func(dst, src int) { out.v[dst] = round(u.v[src], x.dt) })
		*res = e.put(out)
		return 0
	}
	l.rmsNorm = func(res *mlxArray, a, w mlxArray, eps float32, _ mlxStream) int32 {
		defer lock()()
		x, wt := e.get(a), e.get(w)
		n := x.shape[len(x.shape)-1]
		if len(wt.v) != n {
			return e.fail("[rms_norm] weight of %d for rows of %d", len(wt.v), n)
		}
		out := &earr{shape: append([]int(nil), x.shape...), dt: x.dt, v: make([]float64, len(x.v))}
		for r := 0; r < len(x.v); r += n {
			var ss float64
			for _, v := range x.v[r : r+n] {
				ss += v * v
			}
			inv := 1 / math.Sqrt(ss/float64(n)+float64(eps))
			for i, v := range x.v[r : r+n] {
				out.v[r+i] = v * inv * wt.v[i]
			}
		}
		*res = e.put(out)
		return 0
	}
	l.rope = func(res *mlxArray, a mlxArray, dims int32, traditional bool, base optFloat, scale float32, offset int32, freqs mlxArray, _ mlxStream) int32 {
		defer lock()()
		x, f := e.get(a), e.get(freqs)
		if traditional || base&hasValue != 0 || len(f.v) != int(dims)/2 {
			return e.fail("[rope] freqs of %d for %d dims (traditional %v, base set %v)", len(f.v), dims, traditional, base&hasValue != 0)
		}
		D, L := x.shape[len(x.shape)-1], x.shape[len(x.shape)-2]
		out := &earr{shape: append([]int(nil), x.shape...), dt: x.dt, v: append([]float64(nil), x.v...)}
		h := int(dims) / 2
		for r := 0; r < len(x.v)/D; r++ {
			pos := float64(int(offset)+r%L) * float64(scale)
			row := x.v[r*D : (r+1)*D]
			for j := 0; j < h; j++ {
				th := pos / f.v[j]
				c, s := math.Cos(th), math.Sin(th)
				out.v[r*D+j] = row[j]*c - row[j+h]*s
				out.v[r*D+j+h] = row[j]*s + row[j+h]*c
			}
		}
		*res = e.put(out)
		return 0
	}
	l.sdpa = func(res *mlxArray, q, k, v mlxArray, scale float32, mode string, mask, sinks mlxArray, _ mlxStream) int32 {
		defer lock()()
		Q, K, V := e.get(q), e.get(k), e.get(v)
		if mask != 0 || sinks != 0 || (mode != "" && mode != "causal") {
			return e.fail("emu: sdpa mask mode %q with arrays", mode)
		}
		if Q.dt != K.dt || K.dt != V.dt {
			return e.fail("[scaled_dot_product_attention] query, keys and values of dtypes %d, %d, %d", Q.dt, K.dt, V.dt)
		}
		B, H, L, D := Q.shape[0], Q.shape[1], Q.shape[2], Q.shape[3]
		Hk, S, Dv := K.shape[1], K.shape[2], V.shape[3]
		if H%Hk != 0 || K.shape[3] != D {
			return e.fail("[scaled_dot_product_attention] %v over keys %v", Q.shape, K.shape)
		}
		out := &earr{shape: []int{B, H, L, Dv}, dt: Q.dt, v: make([]float64, B*H*L*Dv)}
		for b := 0; b < B; b++ {
			for h := 0; h < H; h++ {
				kh := h / (H / Hk)
				for i := 0; i < L; i++ {
					last := S - 1
					if mode == "causal" {
						last = S - L + i
					}
					w := make([]float64, last+1)
					m := math.Inf(-1)
					for j := range w {
						var s float64
						for d := 0; d < D; d++ {
							s += Q.v[((b*H+h)*L+i)*D+d] * K.v[((b*Hk+kh)*S+j)*D+d]
						}
						w[j] = s * float64(scale)
						m = max(m, w[j])
					}
					var sum float64
					for j := range w {
						w[j] = math.Exp(w[j] - m)
						sum += w[j]
					}
					for j := range w {
						for d := 0; d < Dv; d++ {
							out.v[((b*H+h)*L+i)*Dv+d] += w[j] / sum * V.v[((b*Hk+kh)*S+j)*Dv+d]
						}
					}
				}
			}
		}
		*res = e.put(out)
		return 0
	}
	l.quantizedMatmul = func(res *mlxArray, a, w, scales, biases mlxArray, transpose bool, group, bits optInt, mode string, _ mlxStream) int32 {
		defer lock()()
		x := e.get(a)
		var bs *earr
		if biases != 0 {
			bs = e.get(biases)
		}
		if (mode == "affine") != (bs != nil) {
			return e.fail("[quantized_matmul] mode %s with biases %v", mode, bs != nil)
		}
		W, err := dequant(e.get(w), e.get(scales), bs, int(uint32(group)), int(uint32(bits)), mode)
		if err != nil {
			return e.fail("%v", err)
		}
		if transpose {
			n := len(W.shape)
			perm := make([]int, n)
			for i := range perm {
				perm[i] = i
			}
			perm[n-1], perm[n-2] = n-2, n-1
			W = e.transposed(W, perm)
		}
		out, err := e.matmul(x, W, x.dt)
		if err != nil {
			return e.fail("[quantized_matmul] %v", err)
		}
		*res = e.put(out)
		return 0
	}
	l.dequantize05 = func(res *mlxArray, w, scales, biases mlxArray, group, bits optInt, mode string, dt optDtype, _ mlxStream) int32 {
		defer lock()()
		var bs *earr
		if biases != 0 {
			bs = e.get(biases)
		}
		out, err := dequant(e.get(w), e.get(scales), bs, int(uint32(group)), int(uint32(bits)), mode)
		if err != nil {
			return e.fail("%v", err)
		}
		out.dt = e.get(scales).dt
		if dt&hasValue != 0 {
			out.dt = mlxDtype(uint32(dt))
		}
		*res = e.put(out)
		return 0
	}
	l.quantize05 = func(res *mlxVectorArray, w mlxArray, group, bits optInt, mode string, _ mlxStream) int32 {
		defer lock()()
		x := e.get(w)
		g, bt := int(uint32(group)), int(uint32(bits))
		if mode != "affine" {
			return e.fail("emu: quantize mode %s", mode)
		}
		cols := x.shape[len(x.shape)-1]
		rows := len(x.v) / cols
		src := make([]float32, len(x.v))
		for i, v := range x.v {
			src[i] = float32(v)
		}
		packed, sc, bi, err := quant.Quantize(src, rows, cols, bt, g)
		if err != nil {
			return e.fail("[quantize] %v", err)
		}
		lead := x.shape[:len(x.shape)-1]
		mk := func(shape []int, dt mlxDtype, n int, at func(int) float64) mlxArray {
			a := &earr{shape: shape, dt: dt, v: make([]float64, n)}
			for i := range a.v {
				a.v[i] = at(i)
			}
			return e.put(a)
		}
		gs := append(append([]int(nil), lead...), cols/g)
		e.vecs[*res] = []mlxArray{
			mk(append(append([]int(nil), lead...), quant.Words(cols, bt)), dtUint32, len(packed), func(i int) float64 { return float64(packed[i]) }),
			mk(gs, x.dt, len(sc), func(i int) float64 { return float64(sc[i]) }),
			mk(gs, x.dt, len(bi), func(i int) float64 { return float64(bi[i]) }),
		}
		return 0
	}
	return l
}
