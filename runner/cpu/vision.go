package cpu

import (
	"math"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
)

// Input implements compute.VisionContext.
func (c *context) Input(data []float32, rows, cols int) compute.Tensor {
	if rows < 0 || cols < 0 || len(data) != rows*cols {
		return c.fail("Input of %d values as %d×%d", len(data), rows, cols)
	}
	out := c.newTensor(rows, cols)
	copy(out.data, data)
	return out
}

// LayerNorm implements compute.VisionContext.
func (c *context) LayerNorm(x compute.Tensor, w, b compute.Vector, eps float32) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	wv, ok1 := w.(vector)
	bv, ok2 := b.(vector)
	t := a[0]
	if !ok1 || !ok2 || len(wv) != t.cols || len(bv) != t.cols {
		return c.fail("LayerNorm of %d columns by weights of %d and %d", t.cols, w.Len(), b.Len())
	}
	out := c.newTensor(t.rows, t.cols)
	c.b.parallel(t.rows, 4, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row, o := t.data[r*t.cols:(r+1)*t.cols], out.data[r*t.cols:(r+1)*t.cols]
			var sum float64
			for _, v := range row {
				sum += float64(v)
			}
			mean := sum / float64(t.cols)
			var ss float64
			for _, v := range row {
				d := float64(v) - mean
				ss += d * d
			}
			inv := 1 / math.Sqrt(ss/float64(t.cols)+float64(eps))
			for j, v := range row {
				o[j] = float32((float64(v)-mean)*inv)*wv[j] + bv[j]
			}
		}
	})
	return out
}

// GELU implements compute.VisionContext.
func (c *context) GELU(x compute.Tensor, tanh bool) compute.Tensor {
	if tanh {
		return c.unary("GELU", x, geluTanh)
	}
	return c.unary("GELU", x, func(v float32) float32 {
		return float32(0.5 * float64(v) * (1 + math.Erf(float64(v)/math.Sqrt2)))
	})
}

// RoPERows implements compute.VisionContext.
func (c *context) RoPERows(x, cos, sin compute.Tensor, headDim int) compute.Tensor {
	a, ok := c.args(x, cos, sin)
	if !ok {
		return nilTensor
	}
	t, ct, st := a[0], a[1], a[2]
	half := ct.cols
	if headDim <= 0 || t.cols%headDim != 0 || ct.rows != t.rows || st.rows != t.rows || st.cols != half || 2*half > headDim {
		return c.fail("RoPERows of %d×%d (heads of %d) by angles of %d×%d and %d×%d", t.rows, t.cols, headDim, ct.rows, ct.cols, st.rows, st.cols)
	}
	out := c.newTensor(t.rows, t.cols)
	copy(out.data, t.data)
	heads := t.cols / headDim
	c.b.parallel(t.rows, 8, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			cr, sr := ct.data[r*half:(r+1)*half], st.data[r*half:(r+1)*half]
			for h := range heads {
				v := out.data[r*t.cols+h*headDim:]
				for j := range half {
					x0, x1 := v[j], v[j+half]
					v[j] = x0*cr[j] - x1*sr[j]
					v[j+half] = x1*cr[j] + x0*sr[j]
				}
			}
		}
	})
	return out
}

// scoreBudget bounds the attention scores BlockAttention holds at once (16 MiB of floats).
const scoreBudget = 1 << 22

// BlockAttention implements compute.VisionContext.
func (c *context) BlockAttention(q, k, v compute.Tensor, heads int, scale float32, blocks []int) compute.Tensor {
	a, ok := c.args(q, k, v)
	if !ok {
		return nilTensor
	}
	qt, kt, vt := a[0], a[1], a[2]
	total := 0
	for _, n := range blocks {
		total += n
	}
	if heads <= 0 || qt.cols%heads != 0 || kt.rows != qt.rows || vt.rows != qt.rows || kt.cols != qt.cols || vt.cols != qt.cols || total != qt.rows {
		return c.fail("BlockAttention of %d×%d, %d×%d, %d×%d with %d heads over blocks %v", qt.rows, qt.cols, kt.rows, kt.cols, vt.rows, vt.cols, heads, blocks)
	}
	d, cols := qt.cols/heads, qt.cols
	out := c.newTensor(qt.rows, qt.cols)
	// Per block and head, two products on the prefill kernels: the scores Q·Kᵀ (the keys
	// as an n × d weight), then each row's softmax times V (Vᵀ as a d × n weight). A row's
	// result depends on its block alone.
	s0 := 0
	for _, n := range blocks {
		if n == 0 {
			continue
		}
		// Queries go in chunks whose scores stay within scoreBudget floats: an image of 65,536
		// patches would otherwise need 17 GB of scores per head.
		chunk := min(n, max(4, scoreBudget/n))
		q := c.b.alloc(chunk * d)
		k := &weight{out: n, in: d, f: c.b.alloc(n * d)}
		vT := &weight{out: d, in: n, f: c.b.alloc(d * n)}
		scores := c.b.alloc(chunk * n)
		o := c.b.alloc(chunk * d)
		for h := range heads {
			for i := range n {
				r := (s0 + i) * cols
				copy(k.f[i*d:(i+1)*d], kt.data[r+h*d:r+(h+1)*d])
				for x := range d {
					vT.f[x*n+i] = vt.data[r+h*d+x]
				}
			}
			for c0 := 0; c0 < n; c0 += chunk {
				m := min(chunk, n-c0)
				for i := range m {
					r := (s0 + c0 + i) * cols
					copy(q[i*d:(i+1)*d], qt.data[r+h*d:r+(h+1)*d])
				}
				sc := scores[:m*n]
				c.b.gemm(sc, q[:m*d], m, k)
				c.b.parallel(m, 8, func(lo, hi int) {
					for i := lo; i < hi; i++ {
						row := sc[i*n : (i+1)*n]
						mx := float32(math.Inf(-1))
						for j := range row {
							row[j] *= scale
							mx = max(mx, row[j])
						}
						// The attention kernels' exponential: an image of n patches takes n² of
						// them per head and block, most of the tower's time with math.Exp.
						inv := 1 / kvstore.SoftmaxExp(row, mx)
						for j := range row {
							row[j] *= inv
						}
					}
				})
				c.b.gemm(o[:m*d], sc, m, vT)
				for i := range m {
					r := (s0 + c0 + i) * cols
					copy(out.data[r+h*d:r+(h+1)*d], o[i*d:(i+1)*d])
				}
			}
		}
		c.b.release([][]float32{q, k.f, vT.f, scores, o})
		s0 += n
	}
	return out
}

var _ compute.VisionContext = (*context)(nil)
