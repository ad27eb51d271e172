package cpu

import (
	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
)

var (
	_ compute.LatentAttentionContext = (*context)(nil)
	_ compute.SigmoidMoEContext      = (*context)(nil)
)

// SigmoidMoE implements compute.SigmoidMoEContext: the MoE product, whose Routing.Select
// applies the sigmoid router.
func (c *context) SigmoidMoE(x, router compute.Tensor, gate, up, down compute.Weight, experts int, r compute.Routing) compute.Tensor {
	if !r.Sigmoid {
		return c.fail("SigmoidMoE: the routing is not a sigmoid router")
	}
	return c.moe(x, router, gate, up, down, experts, r, quant.SwiGLU)
}

// LatentAttention implements compute.LatentAttentionContext: kvstore attends over the
// latent layer with the latent queries as Attention.QV.
func (c *context) LatentAttention(qRope, qLatent, kRope, latent compute.Tensor, cache kvstore.Layer, heads int, scale float32) compute.Tensor {
	a, ok := c.args(qRope, qLatent, kRope, latent)
	if !ok {
		return nilTensor
	}
	kvHeads, kDim, vDim := cache.Dims()
	T := a[0].rows
	if a[1].rows != T || a[2].rows != T || a[3].rows != T || a[0].cols != heads*kDim || a[1].cols != heads*vDim ||
		a[2].cols != kvHeads*kDim || a[3].cols != kvHeads*vDim {
		return c.fail("LatentAttention: q %d×%d, q_latent %d×%d, k %d×%d, latent %d×%d do not fit %d heads over a cache of %d KV heads of %d/%d dims",
			a[0].rows, a[0].cols, a[1].rows, a[1].cols, a[2].rows, a[2].cols, a[3].rows, a[3].cols, heads, kvHeads, kDim, vDim)
	}
	if err := cache.Append(a[2].data, a[3].data, T); err != nil {
		return c.fail("LatentAttention: %v", err)
	}
	out := c.newTensor(T, heads*vDim)
	err := cache.Attend(kvstore.Attention{Q: a[0].data, QV: a[1].data, Out: out.data, N: T, Heads: heads, Scale: scale, Threads: c.b.threads})
	if err != nil {
		return c.fail("LatentAttention: %v", err)
	}
	return out
}

// MultiLinear implements compute.LatentAttentionContext: per head, its columns of every
// row gathered, one product with the head's matrix (per segment in a batched pass, as
// Linear), scattered into the head's output columns.
func (c *context) MultiLinear(x compute.Tensor, w compute.Weight, heads int) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	cw, ok := w.(*weight)
	if !ok {
		return c.fail("MultiLinear: weight is not a CPU weight")
	}
	cw, err := c.resolve(cw)
	if err != nil {
		return c.fail("MultiLinear: %v", err)
	}
	t := a[0]
	if heads <= 0 || cw.out%heads != 0 || t.cols != heads*cw.in || cw.stream != nil {
		return c.fail("MultiLinear %q: input %d×%d for %d heads of a %d×%d stack", cw.name, t.rows, t.cols, heads, cw.out, cw.in)
	}
	T, in, out := t.rows, cw.in, cw.out/heads
	res := c.newTensor(T, heads*out)
	xe, ye := c.b.alloc(T*in), c.b.alloc(T*out)
	defer c.b.release([][]float32{xe, ye})
	for h := 0; h < heads; h++ {
		for r := 0; r < T; r++ {
			copy(xe[r*in:(r+1)*in], t.data[r*t.cols+h*in:])
		}
		c.linear(ye, xe, T, cw.expert(h, out))
		for r := 0; r < T; r++ {
			copy(res.data[r*res.cols+h*out:(r+1)*res.cols], ye[r*out:(r+1)*out])
		}
	}
	return res
}
