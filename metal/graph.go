package metal

import (
	"fmt"
	"math"
	"unsafe"
)

// graph records MLX operations on one stream. Every array it makes is owned by it
// until free (or keep, for arrays that outlive it); the first failure is sticky and
// later calls return the null array. It runs on the backend's worker with the Lib's
// mutex held, so error messages belong to the failing call.
type graph struct {
	l     *Lib
	s     mlxStream
	err   error
	owned []mlxArray
}

func (g *graph) fail(err error) mlxArray {
	if g.err == nil {
		g.err = err
	}
	return 0
}

// call runs one mlx-c operation that writes its result through res.
func (g *graph) call(op string, f func(res *mlxArray) int32) mlxArray {
	if g.err != nil {
		return 0
	}
	var r mlxArray
	if err := status(op, f(&r)); err != nil {
		if r != 0 {
			g.l.arrayFree(r)
		}
		return g.fail(err)
	}
	return g.own(r)
}

func (g *graph) own(a mlxArray) mlxArray {
	g.owned = append(g.owned, a)
	return a
}

// keep hands a out of g: it survives free, and its owner must arrayFree it.
func (g *graph) keep(a mlxArray) mlxArray {
	for i := len(g.owned) - 1; i >= 0; i-- {
		if g.owned[i] == a {
			g.owned = append(g.owned[:i], g.owned[i+1:]...)
			break
		}
	}
	return a
}

// release lets go of the arrays made since the graph owned from of them, but keep:
// those no later operation reads are freed once the operations recorded over them have
// run. A barrier in between (which let go of arrays itself) leaves nothing to release.
func (g *graph) release(from int, keep mlxArray) {
	if g.err != nil || len(g.owned) < from {
		return
	}
	kept := g.owned[:from]
	for _, a := range g.owned[from:] {
		if a == keep {
			kept = append(kept, a)
		} else {
			g.l.arrayFree(a)
		}
	}
	clear(g.owned[len(kept):])
	g.owned = kept
}

func (g *graph) free() {
	for _, a := range g.owned {
		g.l.arrayFree(a)
	}
	g.owned = nil
}

// ints converts a shape for mlx-c: a pointer to its first int32 (nil when empty) and
// the count.
func ints(d []int) (*int32, uintptr) {
	if len(d) == 0 {
		return nil, 0
	}
	out := make([]int32, len(d))
	for i, v := range d {
		out[i] = int32(v)
	}
	return &out[0], uintptr(len(out))
}

// unitStrides is ints of n strides of 1, for slices of every element.
func unitStrides(n int) (*int32, uintptr) {
	one := make([]int, n)
	for i := range one {
		one[i] = 1
	}
	return ints(one)
}

// fromData copies n elements at p (of dtype dt) into a new array of shape.
func (g *graph) fromData(p unsafe.Pointer, dt mlxDtype, shape ...int) mlxArray {
	if g.err != nil {
		return 0
	}
	sp, n := ints(shape)
	a, err := handle("mlx_array_new_data", g.l.arrayNewData(p, sp, int32(n), dt))
	if err != nil {
		return g.fail(err)
	}
	return g.own(a)
}

// wrap makes a 1-D array over region elements of dt at base, memory Go keeps alive (the
// array's destructor does nothing), and returns its elements first..first+n-1. Where
// base starts a page and the region spans whole pages, Metal maps it without a copy.
func (g *graph) wrap(base unsafe.Pointer, region, first, n int, dt mlxDtype) mlxArray {
	if g.err != nil {
		return 0
	}
	sp, _ := ints([]int{region})
	a, err := handle("mlx_array_new_data_managed", g.l.arrayNewDataMgd(base, sp, 1, dt, g.l.noop))
	if err != nil {
		return g.fail(err)
	}
	g.own(a)
	if first == 0 && n == region {
		return a
	}
	return g.slice(a, []int{first}, []int{first + n})
}

func (g *graph) fromFloat32s(x []float32, shape ...int) mlxArray {
	if len(x) == 0 {
		return g.fail(fmt.Errorf("metal: an empty array of shape %v", shape))
	}
	return g.fromData(unsafe.Pointer(&x[0]), dtFloat32, shape...)
}

func (g *graph) fromInt32s(x []int32, shape ...int) mlxArray {
	if len(x) == 0 {
		return g.fail(fmt.Errorf("metal: an empty array of shape %v", shape))
	}
	return g.fromData(unsafe.Pointer(&x[0]), dtInt32, shape...)
}

func (g *graph) scalar(v float32) mlxArray {
	if g.err != nil {
		return 0
	}
	a, err := handle("mlx_array_new_float", g.l.arrayNewFloat(v))
	if err != nil {
		return g.fail(err)
	}
	return g.own(a)
}

func (g *graph) reshape(a mlxArray, shape ...int) mlxArray {
	sp, n := ints(shape)
	return g.call("mlx_reshape", func(r *mlxArray) int32 { return g.l.reshape(r, a, sp, n, g.s) })
}

func (g *graph) transpose(a mlxArray, axes ...int) mlxArray {
	ap, n := ints(axes)
	return g.call("mlx_transpose_axes", func(r *mlxArray) int32 { return g.l.transposeAxes(r, a, ap, n, g.s) })
}

func (g *graph) astype(a mlxArray, dt mlxDtype) mlxArray {
	return g.call("mlx_astype", func(r *mlxArray) int32 { return g.l.astype(r, a, dt, g.s) })
}

func (g *graph) matmul(a, b mlxArray) mlxArray {
	return g.call("mlx_matmul", func(r *mlxArray) int32 { return g.l.matmul(r, a, b, g.s) })
}

func (g *graph) add(a, b mlxArray) mlxArray {
	return g.call("mlx_add", func(r *mlxArray) int32 { return g.l.add(r, a, b, g.s) })
}

func (g *graph) mul(a, b mlxArray) mlxArray {
	return g.call("mlx_multiply", func(r *mlxArray) int32 { return g.l.multiply(r, a, b, g.s) })
}

func (g *graph) sigmoid(a mlxArray) mlxArray {
	return g.call("mlx_sigmoid", func(r *mlxArray) int32 { return g.l.sigmoid(r, a, g.s) })
}

func (g *graph) greater(a, b mlxArray) mlxArray {
	return g.call("mlx_greater", func(r *mlxArray) int32 { return g.l.greater(r, a, b, g.s) })
}

func (g *graph) where(cond, x, y mlxArray) mlxArray {
	return g.call("mlx_where", func(r *mlxArray) int32 { return g.l.where(r, cond, x, y, g.s) })
}

func (g *graph) arange(start, stop int) mlxArray {
	return g.call("mlx_arange", func(r *mlxArray) int32 {
		return g.l.arange(r, float64(start), float64(stop), 1, dtInt32, g.s)
	})
}

func (g *graph) softmax(a mlxArray, axis int) mlxArray {
	return g.call("mlx_softmax_axis", func(r *mlxArray) int32 { return g.l.softmaxAxis(r, a, int32(axis), true, g.s) })
}

func (g *graph) expandDims(a mlxArray, axis int) mlxArray {
	return g.call("mlx_expand_dims", func(r *mlxArray) int32 { return g.l.expandDims(r, a, int32(axis), g.s) })
}

func (g *graph) broadcastTo(a mlxArray, shape ...int) mlxArray {
	sp, n := ints(shape)
	return g.call("mlx_broadcast_to", func(r *mlxArray) int32 { return g.l.broadcastTo(r, a, sp, n, g.s) })
}

func (g *graph) contiguous(a mlxArray) mlxArray {
	return g.call("mlx_contiguous", func(r *mlxArray) int32 { return g.l.contiguous(r, a, false, g.s) })
}

func (g *graph) view(a mlxArray, dt mlxDtype) mlxArray {
	return g.call("mlx_view", func(r *mlxArray) int32 { return g.l.view(r, a, dt, g.s) })
}

func (g *graph) takeAxis(a, idx mlxArray, axis int) mlxArray {
	return g.call("mlx_take_axis", func(r *mlxArray) int32 { return g.l.takeAxis(r, a, idx, int32(axis), g.s) })
}

// slice is a[start:stop] with unit strides.
func (g *graph) slice(a mlxArray, start, stop []int) mlxArray {
	sp, n := ints(start)
	ep, m := ints(stop)
	op, k := unitStrides(len(start))
	return g.call("mlx_slice", func(r *mlxArray) int32 { return g.l.slice(r, a, sp, n, ep, m, op, k, g.s) })
}

// sliceUpdate is src with src[start:stop] = upd.
func (g *graph) sliceUpdate(src, upd mlxArray, start, stop []int) mlxArray {
	sp, n := ints(start)
	ep, m := ints(stop)
	op, k := unitStrides(len(start))
	return g.call("mlx_slice_update", func(r *mlxArray) int32 {
		return g.l.sliceUpdate(r, src, upd, sp, n, ep, m, op, k, g.s)
	})
}

func (g *graph) rmsNorm(x, w mlxArray, eps float32) mlxArray {
	return g.call("mlx_fast_rms_norm", func(r *mlxArray) int32 { return g.l.rmsNorm(r, x, w, eps, g.s) })
}

// rope rotates the first dims columns of the last axis, "rotate half" layout, at
// positions offset.. along axis -2, with per-frequency periods freqs (1/inv_freq).
// rope is MLX's fast RoPE; traditional rotates the pairs (2j, 2j+1) (compute.RoPE.Interleaved).
func (g *graph) rope(x mlxArray, dims, offset int, freqs mlxArray, traditional bool) mlxArray {
	return g.call("mlx_fast_rope", func(r *mlxArray) int32 {
		return g.l.rope(r, x, int32(dims), traditional, 0, 1, int32(offset), freqs, g.s)
	})
}

func (g *graph) sdpa(q, k, v mlxArray, scale float32, causal bool) mlxArray {
	mode := ""
	if causal {
		mode = "causal"
	}
	return g.call("mlx_fast_scaled_dot_product_attention", func(r *mlxArray) int32 {
		return g.l.sdpa(r, q, k, v, scale, mode, 0, 0, g.s)
	})
}

// qmm is x·Wᵀ (transpose) or x·W with W quantized in mode (biases is null for the
// float modes).
func (g *graph) qmm(x, w, scales, biases mlxArray, transpose bool, group, bits int, mode string) mlxArray {
	return g.call("mlx_quantized_matmul", func(r *mlxArray) int32 {
		return g.l.quantizedMatmul(r, x, w, scales, biases, transpose, someInt(group), someInt(bits), mode, g.s)
	})
}

func (g *graph) dequantize(w, scales, biases mlxArray, group, bits int, mode string, dt mlxDtype) mlxArray {
	return g.call("mlx_dequantize", func(r *mlxArray) int32 {
		if g.l.ABI == "0.6" {
			return g.l.dequantize06(r, w, scales, biases, someInt(group), someInt(bits), mode, 0, someDtype(dt), g.s)
		}
		return g.l.dequantize05(r, w, scales, biases, someInt(group), someInt(bits), mode, someDtype(dt), g.s)
	})
}

// quantize returns MLX's affine codes, scales and biases of w along its last axis.
func (g *graph) quantize(w mlxArray, group, bits int) (codes, scales, biases mlxArray) {
	if g.err != nil {
		return 0, 0, 0
	}
	vec := g.l.vectorArrayNew()
	defer g.l.vectorArrayFree(vec)
	var rc int32
	if g.l.ABI == "0.6" {
		rc = g.l.quantize06(&vec, w, someInt(group), someInt(bits), "affine", 0, g.s)
	} else {
		rc = g.l.quantize05(&vec, w, someInt(group), someInt(bits), "affine", g.s)
	}
	if err := status("mlx_quantize", rc); err != nil {
		g.fail(err)
		return 0, 0, 0
	}
	if n := g.l.vectorArraySize(vec); n != 3 {
		g.fail(fmt.Errorf("metal: mlx_quantize in affine mode returned %d arrays, want codes, scales and biases", n))
		return 0, 0, 0
	}
	var out [3]mlxArray
	for i := range out {
		out[i] = g.call("mlx_vector_array_get", func(r *mlxArray) int32 { return g.l.vectorArrayGet(r, vec, uintptr(i)) })
	}
	return out[0], out[1], out[2]
}

// eval computes every array in as, in one mlx_eval.
func (g *graph) eval(as ...mlxArray) {
	if g.err != nil {
		return
	}
	vec := g.l.vectorArrayNew()
	defer g.l.vectorArrayFree(vec)
	for _, a := range as {
		if err := status("mlx_vector_array_append_value", g.l.vectorArrayAppend(vec, a)); err != nil {
			g.fail(err)
			return
		}
	}
	g.l.evals.Add(1)
	if err := status("mlx_eval", g.l.eval(vec)); err != nil {
		g.fail(err)
	}
}

// float32Array is a as a row-contiguous float32 array, ready to read after eval.
func (g *graph) float32Array(a mlxArray) mlxArray {
	return g.contiguous(g.astype(a, dtFloat32))
}

// read copies an evaluated array from float32Array into Go memory.
func (g *graph) read(a mlxArray) []float32 {
	if g.err != nil {
		return nil
	}
	n := int(g.l.arraySize(a))
	p := g.l.arrayDataFloat32(a)
	if p == nil {
		g.fail(&Error{Op: "mlx_array_data_float32", Msg: takeError()})
		return nil
	}
	return append([]float32(nil), unsafe.Slice((*float32)(p), n)...)
}

// shape reads a's shape; nil after an error, when a may be the null array.
func (g *graph) shape(a mlxArray) []int {
	if g.err != nil || a == 0 {
		return nil
	}
	n := int(g.l.arrayNdim(a))
	if n == 0 {
		return nil
	}
	p := unsafe.Slice(g.l.arrayShape(a), n)
	out := make([]int, n)
	for i, v := range p {
		out[i] = int(v)
	}
	return out
}

func (g *graph) unary(op string, fn func(res *mlxArray, a mlxArray, s mlxStream) int32, a mlxArray) mlxArray {
	return g.call(op, func(r *mlxArray) int32 { return fn(r, a, g.s) })
}

func (g *graph) binary(op string, fn func(res *mlxArray, a, b mlxArray, s mlxStream) int32, a, b mlxArray) mlxArray {
	return g.call(op, func(r *mlxArray) int32 { return fn(r, a, b, g.s) })
}

func (g *graph) sub(a, b mlxArray) mlxArray { return g.binary("mlx_subtract", g.l.subtract, a, b) }
func (g *graph) div(a, b mlxArray) mlxArray { return g.binary("mlx_divide", g.l.divide, a, b) }
func (g *graph) neg(a mlxArray) mlxArray    { return g.unary("mlx_negative", g.l.negative, a) }
func (g *graph) exp(a mlxArray) mlxArray    { return g.unary("mlx_exp", g.l.exp, a) }
func (g *graph) tanh(a mlxArray) mlxArray   { return g.unary("mlx_tanh", g.l.tanh, a) }
func (g *graph) rsqrt(a mlxArray) mlxArray  { return g.unary("mlx_rsqrt", g.l.rsqrt, a) }
func (g *graph) square(a mlxArray) mlxArray { return g.unary("mlx_square", g.l.square, a) }
func (g *graph) maximum(a, b mlxArray) mlxArray {
	return g.binary("mlx_maximum", g.l.maximum, a, b)
}
func (g *graph) erf(a mlxArray) mlxArray { return g.unary("mlx_erf", g.l.erf, a) }
func (g *graph) minimum(a, b mlxArray) mlxArray {
	return g.binary("mlx_minimum", g.l.minimum, a, b)
}

// hadamard is the normalized Walsh–Hadamard transform of the last axis (a power of
// two long), kvstore.Hadamard's: the rotation of a rotated KV cache's rows.
func (g *graph) hadamard(a mlxArray, n int) mlxArray {
	return g.call("mlx_hadamard_transform", func(r *mlxArray) int32 {
		return g.l.hadamard(r, a, someFloat(float32(1/math.Sqrt(float64(n)))), g.s)
	})
}

// softplus is log(1 + eˣ), computed as logaddexp(x, 0) so that it neither overflows
// nor loses the small values.
func (g *graph) softplus(a mlxArray) mlxArray {
	return g.binary("mlx_logaddexp", g.l.logaddexp, a, g.scalar(0))
}

func (g *graph) silu(a mlxArray) mlxArray { return g.mul(a, g.sigmoid(a)) }

func (g *graph) sum(a mlxArray, axis int, keepdims bool) mlxArray {
	return g.call("mlx_sum_axis", func(r *mlxArray) int32 { return g.l.sumAxis(r, a, int32(axis), keepdims, g.s) })
}

func (g *graph) argpartition(a mlxArray, kth, axis int) mlxArray {
	return g.call("mlx_argpartition_axis", func(r *mlxArray) int32 { return g.l.argpartition(r, a, int32(kth), int32(axis), g.s) })
}

func (g *graph) takeAlong(a, idx mlxArray, axis int) mlxArray {
	return g.call("mlx_take_along_axis", func(r *mlxArray) int32 { return g.l.takeAlongAxis(r, a, idx, int32(axis), g.s) })
}

// concat joins arrays along axis.
func (g *graph) concat(axis int, as ...mlxArray) mlxArray {
	if g.err != nil {
		return 0
	}
	vec := g.l.vectorArrayNew()
	defer g.l.vectorArrayFree(vec)
	for _, a := range as {
		if err := status("mlx_vector_array_append_value", g.l.vectorArrayAppend(vec, a)); err != nil {
			return g.fail(err)
		}
	}
	return g.call("mlx_concatenate_axis", func(r *mlxArray) int32 { return g.l.concatenate(r, vec, int32(axis), g.s) })
}

// gatherMM is a·bᵢ for the matrices of b picked by rhs (a batched matmul over a stack).
func (g *graph) gatherMM(a, b, rhs mlxArray) mlxArray {
	return g.call("mlx_gather_mm", func(r *mlxArray) int32 { return g.l.gatherMM(r, a, b, 0, rhs, false, g.s) })
}

// gatherQMM is x·Wᵢᵀ for the quantized matrices of a stack picked by rhs: only those
// matrices are read.
func (g *graph) gatherQMM(x, w, scales, biases, rhs mlxArray, group, bits int, mode string) mlxArray {
	return g.call("mlx_gather_qmm", func(r *mlxArray) int32 {
		return g.l.gatherQMM(r, x, w, scales, biases, 0, rhs, true, someInt(group), someInt(bits), mode, 0, g.s)
	})
}

// errShape says an array had a shape an operation cannot take.
func errShape(what string, shape []int) error {
	return fmt.Errorf("metal: %s of shape %v", what, shape)
}
