package metal

import (
	"math"

	"github.com/mlxg/mlxg/runner/compute"
)

// The operations of vision towers (Qwen3.5's ViT) and of rotary angles given per row
// (compute.VisionContext), built from MLX operations in float32, as the CPU backend
// computes them.

var _ compute.VisionContext = (*context)(nil)

// Input implements compute.VisionContext: data is copied now, so the caller may reuse it.
func (c *context) Input(data []float32, rows, cols int) compute.Tensor {
	if c.err != nil {
		return nilTensor
	}
	if rows <= 0 || cols <= 0 || len(data) != rows*cols {
		return c.fail("Input of %d values as %d×%d", len(data), rows, cols)
	}
	d := append([]float32(nil), data...)
	return c.record(rows, cols, func(g *graph) mlxArray { return g.fromFloat32s(d, rows, cols) })
}

// LayerNorm implements compute.VisionContext: (x − mean)·rsqrt(var + eps)·w + b per row,
// the variance biased.
func (c *context) LayerNorm(x compute.Tensor, w, b compute.Vector, eps float32) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	wv, ok1 := w.(*vector)
	bv, ok2 := b.(*vector)
	t := a[0]
	if !ok1 || !ok2 || wv.n != t.cols || bv.n != t.cols {
		return c.fail("LayerNorm of %d columns by weights of %d and %d", t.cols, w.Len(), b.Len())
	}
	return c.record(t.rows, t.cols, func(g *graph) mlxArray {
		x := g.astype(t.arr, dtFloat32)
		n := g.scalar(float32(t.cols))
		d := g.sub(x, g.div(g.sum(x, -1, true), n))                                  // rows × cols
		inv := g.rsqrt(g.add(g.div(g.sum(g.square(d), -1, true), n), g.scalar(eps))) // rows × 1
		return g.add(g.mul(g.mul(d, inv), wv.a), bv.a)
	})
}

// GELU implements compute.VisionContext: 0.5·x·(1 + erf(x/√2)), or gelu_pytorch_tanh.
func (c *context) GELU(x compute.Tensor, tanh bool) compute.Tensor {
	return c.unary("GELU", x, func(g *graph, a mlxArray) mlxArray {
		a = g.astype(a, dtFloat32)
		if tanh {
			return geluTanh(g, a)
		}
		return g.mul(g.mul(a, g.scalar(0.5)), g.add(g.erf(g.mul(a, g.scalar(1/math.Sqrt2))), g.scalar(1)))
	})
}

// RoPERows implements compute.VisionContext: each row's heads turn by that row's angles
// (cos and sin, T × D/2), the pairs (j, j+D/2) of a head's first D columns.
func (c *context) RoPERows(x, cos, sin compute.Tensor, headDim int) compute.Tensor {
	a, ok := c.args(x, cos, sin)
	if !ok {
		return nilTensor
	}
	t, ct, st := a[0], a[1], a[2]
	half := ct.cols
	if headDim <= 0 || t.cols%headDim != 0 || ct.rows != t.rows || st.rows != t.rows || st.cols != half || half <= 0 || 2*half > headDim {
		return c.fail("RoPERows of %d×%d (heads of %d) by angles of %d×%d and %d×%d", t.rows, t.cols, headDim, ct.rows, ct.cols, st.rows, st.cols)
	}
	T, H := t.rows, t.cols/headDim
	return c.record(T, t.cols, func(g *graph) mlxArray {
		x3 := g.reshape(g.astype(t.arr, dtFloat32), T, H, headDim)
		cs, sn := g.reshape(ct.arr, T, 1, half), g.reshape(st.arr, T, 1, half) // one angle per row, every head
		x1 := g.slice(x3, []int{0, 0, 0}, []int{T, H, half})
		x2 := g.slice(x3, []int{0, 0, half}, []int{T, H, 2 * half})
		parts := []mlxArray{g.sub(g.mul(x1, cs), g.mul(x2, sn)), g.add(g.mul(x2, cs), g.mul(x1, sn))}
		if 2*half < headDim {
			parts = append(parts, g.slice(x3, []int{0, 0, 2 * half}, []int{T, H, headDim}))
		}
		return g.reshape(g.concat(2, parts...), T, t.cols)
	})
}

// BlockAttention implements compute.VisionContext: per block of consecutive rows, every
// head's softmax(scale·q·kᵀ)·v over that block's rows alone.
func (c *context) BlockAttention(q, k, v compute.Tensor, nHeads int, scale float32, blocks []int) compute.Tensor {
	a, ok := c.args(q, k, v)
	if !ok {
		return nilTensor
	}
	qt, kt, vt := a[0], a[1], a[2]
	total := 0
	for _, n := range blocks {
		if n < 0 {
			total = -1
			break
		}
		total += n
	}
	if nHeads <= 0 || qt.cols%nHeads != 0 || kt.rows != qt.rows || vt.rows != qt.rows || kt.cols != qt.cols || vt.cols != qt.cols || total != qt.rows {
		return c.fail("BlockAttention of %d×%d, %d×%d, %d×%d with %d heads over blocks %v", qt.rows, qt.cols, kt.rows, kt.cols, vt.rows, vt.cols, nHeads, blocks)
	}
	d := qt.cols / nHeads
	blocks = append([]int(nil), blocks...)
	return c.record(qt.rows, qt.cols, func(g *graph) mlxArray {
		var outs []mlxArray
		s0 := 0
		for _, n := range blocks {
			if n == 0 {
				continue
			}
			// The block's rows as [1, heads, n, d].
			block := func(x mlxArray) mlxArray {
				return heads(g, g.slice(g.astype(x, dtFloat32), []int{s0, 0}, []int{s0 + n, qt.cols}), n, nHeads, d)
			}
			qb, kb, vb := block(qt.arr), block(kt.arr), block(vt.arr)
			sc := g.mul(g.matmul(qb, g.transpose(kb, 0, 1, 3, 2)), g.scalar(scale)) // [1, heads, n, n]
			o := g.matmul(g.softmax(sc, -1), vb)                                    // [1, heads, n, d]
			outs = append(outs, rows(g, o, n, nHeads, d))
			s0 += n
		}
		if len(outs) == 1 {
			return outs[0]
		}
		return g.concat(0, outs...)
	})
}
