package metal

import (
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
)

// Multi-head latent attention (GLM-4.7-Flash, DeepSeek's MLA) on MLX. The cache is a
// kvstore latent layer: one KV head whose keys are the shared rotary key (ropeDim) and
// whose values are the normalised latent (rank). A head's score over position j is
// scale·(qRope·kRope_j + qLatent·latent_j): storedAttention scores the values a second
// time with the latent queries (its qv) and adds the two before the softmax, so the
// cache is read where it lies, quantized or not, like any other layer's.

var _ compute.LatentAttentionContext = (*context)(nil)

// LatentAttention implements compute.LatentAttentionContext.
func (c *context) LatentAttention(qRope, qLatent, kRope, latent compute.Tensor, cache kvstore.Layer, nHeads int, scale float32) compute.Tensor {
	if qLatent == nil {
		return c.fail("LatentAttention without latent queries")
	}
	return c.attention("LatentAttention", qRope, kRope, latent, cache, nHeads, scale, nil, qLatent, nil)
}

// MultiLinear implements compute.LatentAttentionContext: one batched product over the
// heads, x viewed as [heads, T, in] against the stack [heads, out, in] (quantized_matmul
// broadcasts over the leading axis; matmul with the float stack transposed).
func (c *context) MultiLinear(x compute.Tensor, w compute.Weight, nHeads int) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	mw, ok := w.(*weight)
	if !ok {
		return c.fail("MultiLinear: weight is not a Metal weight")
	}
	t := a[0]
	if nHeads <= 0 || mw.stream != nil || mw.bias != 0 || mw.out%nHeads != 0 || t.cols != nHeads*mw.in {
		return c.fail("MultiLinear %q: input %d×%d for %d heads of a %d×%d stack", mw.name, t.rows, t.cols, nHeads, mw.out, mw.in)
	}
	T, in, out := t.rows, mw.in, mw.out/nHeads
	return c.record(T, nHeads*out, func(g *graph) mlxArray {
		// x: T × heads·in → [heads, T, in], in the weight's compute dtype.
		xh := g.transpose(g.reshape(g.astype(t.arr, mw.dt), T, nHeads, in), 1, 0, 2)
		stack := func(a mlxArray) mlxArray { // heads·out × cols → [heads, out, cols]
			shape := g.shape(a)
			if g.err != nil || len(shape) != 2 {
				return g.fail(errShape("a per-head stack", shape))
			}
			return g.reshape(a, nHeads, out, shape[1])
		}
		var y mlxArray // [heads, T, out]
		if mw.q.Quantized() {
			var biases mlxArray
			if mw.biases != 0 {
				biases = stack(mw.biases)
			}
			y = g.qmm(xh, stack(mw.w), stack(mw.scales), biases, true, mw.q.GroupSize, mw.q.Bits, string(mw.q.Mode))
		} else {
			y = g.matmul(xh, g.transpose(stack(mw.w), 0, 2, 1))
		}
		// [heads, T, out] → T × heads·out.
		return g.reshape(g.transpose(g.astype(y, dtFloat32), 1, 0, 2), T, nHeads*out)
	})
}
