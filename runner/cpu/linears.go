package cpu

import (
	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/runner/compute"
)

// maxLinears is the most products Linears runs together (a layer's q, k and v).
const maxLinears = 4

// Linears implements compute.LinearsContext. Decode products of affine-quantized weights
// of one input share one prepared input vector and one parallel pass over all their rows;
// each row is computed as quantMatVec computes it (affineMatVecs: a row's result depends on
// that row and the prepared input alone), so the values are Linear's. Anything else goes through
// Linear one product at a time.
func (c *context) Linears(x compute.Tensor, ws []compute.Weight, out []compute.Tensor) {
	var cw [maxLinears]*weight
	a, ok := c.args(x)
	if ok && c.fusable(a[0], ws, &cw) {
		c.linears(a[0], cw, len(ws), out)
		return
	}
	for i, w := range ws {
		out[i] = c.Linear(x, w)
	}
}

// fusable reports whether the products of x with ws would all take quantMatVec's vector
// path with the same prepared input, and sets cw to the CPU weights.
func (c *context) fusable(x *tensor, ws []compute.Weight, cw *[maxLinears]*weight) bool {
	T := x.rows
	if len(ws) < 2 || len(ws) > maxLinears || T < 1 || T >= 4 || (len(c.segs) >= 2 && sum(c.segs) == T) {
		return false
	}
	for i, w := range ws {
		v, ok := w.(*weight)
		if !ok || v.in != x.cols || v.q.Mode != quant.Affine {
			return false
		}
		if v.dense != nil {
			var err error
			if v, err = c.resolve(v); err != nil {
				return false // Linear reports it
			}
		}
		if i > 0 && (v.q.Bits != cw[0].q.Bits || v.q.GroupSize != cw[0].q.GroupSize) {
			return false
		}
		cw[i] = v
	}
	return true
}

// linears computes the products of x with ws[:n], fusable ones, into out.
func (c *context) linears(x *tensor, ws [maxLinears]*weight, n int, out []compute.Tensor) {
	var dst [maxLinears][]float32
	for i := range n {
		t := c.newTensor(x.rows, ws[i].out)
		dst[i], out[i] = t.data, t
	}
	c.b.affineMatVecs(dst, x.data, x.rows, ws, n, c.b.int8 == int8All) // never a batched pass (fusable)
	for i := range n {
		if w := ws[i]; w.bias != nil {
			for t := 0; t < x.rows; t++ {
				addTo(dst[i][t*w.out:(t+1)*w.out], w.bias)
			}
		}
	}
}
