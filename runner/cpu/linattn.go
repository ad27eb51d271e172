package cpu

import (
	"math"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/runner/compute"
)

// CausalConv1D implements compute.LinearAttentionContext.
func (c *context) CausalConv1D(x compute.Tensor, w compute.Weight, state []float32) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	cw, ok := w.(*weight)
	if !ok || cw.q.Quantized() {
		return c.fail("CausalConv1D: the kernel must be an unquantized CPU weight")
	}
	xs := a[0]
	T, C := xs.rows, xs.cols
	K, err := compute.ConvShape(compute.DimsOf(xs), len(cw.f), len(state))
	if err != nil {
		return c.fail("%v", err)
	}
	// x' = state rows then x rows.
	xp := c.b.alloc((K - 1 + T) * C)
	defer c.b.release([][]float32{xp})
	copy(xp, state)
	copy(xp[(K-1)*C:], xs.data)
	out := c.newTensor(T, C)
	c.b.parallel(C, 64, func(lo, hi int) {
		for t := 0; t < T; t++ {
			o := out.data[t*C : (t+1)*C]
			for ch := lo; ch < hi; ch++ {
				kw := cw.f[ch*K : (ch+1)*K]
				var s float32
				for j, wj := range kw {
					s += wj * xp[(t+j)*C+ch]
				}
				o[ch] = s * sigmoid(s)
			}
		}
	})
	copy(state, xp[T*C:(T+K-1)*C])
	return out
}

// GatedDelta implements compute.LinearAttentionContext: the recurrent form, one step
// per position, heads in parallel.
func (c *context) GatedDelta(q, k, v, g, beta compute.Tensor, heads int, state []float32) compute.Tensor {
	a, ok := c.args(q, k, v, g, beta)
	if !ok {
		return nilTensor
	}
	qs, ks, vs, gs, bs := a[0], a[1], a[2], a[3], a[4]
	T := qs.rows
	d := compute.DimsOf
	kHeads, dk, dv, err := compute.DeltaShape(d(qs), d(ks), d(vs), d(gs), d(bs), heads, len(state))
	if err != nil {
		return c.fail("%v", err)
	}
	rep := heads / kHeads
	out := c.newTensor(T, heads*dv)
	c.b.parallel(heads, 1, func(lo, hi int) {
		mem := make([]float32, dv)
		for h := lo; h < hi; h++ {
			S := state[h*dk*dv : (h+1)*dk*dv] // dk rows of dv
			kh := h / rep
			for t := 0; t < T; t++ {
				qt := qs.data[t*qs.cols+kh*dk:][:dk]
				kt := ks.data[t*ks.cols+kh*dk:][:dk]
				vt := vs.data[t*vs.cols+h*dv:][:dv]
				decay := float32(math.Exp(float64(gs.data[t*heads+h])))
				b := bs.data[t*heads+h]
				clear(mem)
				for i := range S {
					S[i] *= decay
				}
				for i, ki := range kt { // mem = Sᵀk
					quant.Axpy(mem, S[i*dv:(i+1)*dv], ki)
				}
				for j := range mem { // delta = β(v − Sᵀk)
					mem[j] = b * (vt[j] - mem[j])
				}
				for i, ki := range kt { // S += k ⊗ delta
					quant.Axpy(S[i*dv:(i+1)*dv], mem, ki)
				}
				o := out.data[t*heads*dv+h*dv:][:dv]
				clear(o)
				for i, qi := range qt { // o = Sᵀq
					quant.Axpy(o, S[i*dv:(i+1)*dv], qi)
				}
			}
		}
	})
	return out
}

// DeltaGates implements compute.LinearAttentionContext.
func (c *context) DeltaGates(at, bt compute.Tensor, aLog, dtBias compute.Vector) (compute.Tensor, compute.Tensor) {
	a, ok := c.args(at, bt)
	if !ok {
		return nilTensor, nilTensor
	}
	al, ok1 := aLog.(vector)
	db, ok2 := dtBias.(vector)
	H := a[0].cols
	if !ok1 || !ok2 || len(al) != H || len(db) != H || a[1].cols != H || a[1].rows != a[0].rows {
		return c.fail("DeltaGates: a %d×%d, b %d×%d, A_log of %d and dt_bias of %d values", a[0].rows, a[0].cols, a[1].rows, a[1].cols, aLog.Len(), dtBias.Len()), nilTensor
	}
	g, beta := c.newTensor(a[0].rows, H), c.newTensor(a[0].rows, H)
	for i, x := range a[0].data {
		h := i % H
		z := float64(x + db[h])
		sp := z // softplus as torch: linear above 20
		if z <= 20 {
			sp = math.Log1p(math.Exp(z))
		}
		g.data[i] = float32(-math.Exp(float64(al[h])) * sp)
		beta.data[i] = sigmoid(a[1].data[i])
	}
	return g, beta
}

// L2NormScale implements compute.LinearAttentionContext.
func (c *context) L2NormScale(x compute.Tensor, eps, s float32) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	xs := a[0]
	out := c.newTensor(xs.rows, xs.cols)
	for r := 0; r < xs.rows; r++ {
		row := xs.data[r*xs.cols : (r+1)*xs.cols]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		inv := float32(1/math.Sqrt(ss+float64(eps))) * s
		for i, v := range row {
			out.data[r*xs.cols+i] = v * inv
		}
	}
	return out
}

// Cols implements compute.LinearAttentionContext.
func (c *context) Cols(x compute.Tensor, start, n int) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	xs := a[0]
	if start < 0 || n < 0 || start+n > xs.cols {
		return c.fail("Cols %d..%d of a tensor of %d columns", start, start+n, xs.cols)
	}
	out := c.newTensor(xs.rows, n)
	for r := 0; r < xs.rows; r++ {
		copy(out.data[r*n:(r+1)*n], xs.data[r*xs.cols+start:])
	}
	return out
}

// ConcatCols implements compute.LinearAttentionContext.
func (c *context) ConcatCols(xs ...compute.Tensor) compute.Tensor {
	a, ok := c.argList(xs...)
	if !ok || len(a) == 0 {
		return c.fail("ConcatCols of no tensors")
	}
	cols, err := compute.ConcatShape(dims(a), false)
	if err != nil {
		return c.fail("%v", err)
	}
	out := c.newTensor(a[0].rows, cols)
	for r := 0; r < a[0].rows; r++ {
		off := r * cols
		for _, t := range a {
			copy(out.data[off:off+t.cols], t.data[r*t.cols:(r+1)*t.cols])
			off += t.cols
		}
	}
	return out
}
