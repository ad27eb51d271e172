package pipeline

import (
	"fmt"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
)

// The optional operations of the hybrid and mixture-of-experts architectures, and of
// batched passes, in a stage context: each is skipped as the core ops are, and run by
// the inner context when it has them.

func (c *stageContext) act() (compute.ActivationContext, bool) {
	return compute.Ext[compute.ActivationContext](c.inner)
}

func (c *stageContext) lin() (compute.LinearAttentionContext, bool) {
	return compute.Ext[compute.LinearAttentionContext](c.inner)
}

func (c *stageContext) MoE(x, router compute.Tensor, gate, up, down compute.Weight, experts int, r compute.Routing) compute.Tensor {
	rows, _ := x.Dims()
	out, _ := down.Dims()
	in, ok := c.withWeights([]compute.Tensor{x, router}, gate, up, down)
	if !ok {
		return c.void(rows, out/max(experts, 1))
	}
	m, ok := compute.Ext[compute.MoEContext](c.inner)
	if !ok {
		return compute.Unsupported(c.inner, "mixture of experts")
	}
	return c.real(m.MoE(in[0], in[1], gate, up, down, experts, r))
}

func (c *stageContext) ClampedMoE(x, router compute.Tensor, gate, up, down compute.Weight, experts int, r compute.Routing, act compute.ClampedSwiGLU) compute.Tensor {
	rows, _ := x.Dims()
	out, _ := down.Dims()
	in, ok := c.withWeights([]compute.Tensor{x, router}, gate, up, down)
	if !ok {
		return c.void(rows, out/max(experts, 1))
	}
	m, ok := compute.Ext[compute.ClampedMoEContext](c.inner)
	if !ok {
		return compute.Unsupported(c.inner, "gpt-oss's experts")
	}
	return c.real(m.ClampedMoE(in[0], in[1], gate, up, down, experts, r, act))
}

// GeGLUMoE is MoE with Gemma 4's GELU-gated experts.
func (c *stageContext) GeGLUMoE(x, router compute.Tensor, gate, up, down compute.Weight, experts int, r compute.Routing) compute.Tensor {
	rows, _ := x.Dims()
	out, _ := down.Dims()
	in, ok := c.withWeights([]compute.Tensor{x, router}, gate, up, down)
	if !ok {
		return c.void(rows, out/max(experts, 1))
	}
	m, ok := compute.Ext[compute.GeGLUMoEContext](c.inner)
	if !ok {
		return compute.Unsupported(c.inner, "Gemma 4's experts")
	}
	return c.real(m.GeGLUMoE(in[0], in[1], gate, up, down, experts, r))
}

// AttentionSinks is Attention (stage.go) with gpt-oss's sinks: skipped on a layer
// another rank holds, run by the inner context on this rank's.
func (c *stageContext) AttentionSinks(q, k, v compute.Tensor, cache kvstore.Layer, heads int, scale float32, sinks compute.Vector) compute.Tensor {
	return c.attend(q, k, v, cache, func(in []compute.Tensor) compute.Tensor {
		sc, ok := compute.Ext[compute.SinkAttentionContext](c.inner)
		if !ok {
			return compute.Unsupported(c.inner, "attention sinks")
		}
		return sc.AttentionSinks(in[0], in[1], in[2], cache, heads, scale, sinks)
	})
}

// AttentionShared is a KV-shared layer's attention (compute.SharedKVContext): skipped on
// a layer another rank holds (its source, on the same rank, counted the positions), run
// by the inner context on this rank's.
func (c *stageContext) AttentionShared(q compute.Tensor, cache kvstore.Layer, heads int, scale float32, spans []kvstore.Span) compute.Tensor {
	rows, cols := q.Dims()
	in, void := c.tensors(q)
	if void {
		return c.void(rows, cols)
	}
	if _, ok := cache.(*skipped); ok {
		return c.fail(fmt.Errorf("model: %v computed a layer whose KV another rank holds", c.st))
	}
	sc, ok := compute.Ext[compute.SharedKVContext](c.inner)
	if !ok {
		return compute.Unsupported(c.inner, "attention over another layer's KV")
	}
	return c.real(sc.AttentionShared(in[0], cache, heads, scale, spans))
}

func (c *stageContext) GeGLU(gate, up compute.Tensor) compute.Tensor {
	rows, cols := gate.Dims()
	return c.plain(rows, cols, func(in []compute.Tensor) compute.Tensor {
		a, ok := c.act()
		if !ok {
			return compute.Unsupported(c.inner, "GeGLU")
		}
		return a.GeGLU(in[0], in[1])
	}, gate, up)
}

func (c *stageContext) RMSNormOffset(x compute.Tensor, w compute.Vector, offset, eps float32) compute.Tensor {
	rows, cols := x.Dims()
	in, ok := c.withWeights([]compute.Tensor{x}, w)
	if !ok {
		return c.void(rows, cols)
	}
	a, ok := c.act()
	if !ok {
		return compute.Unsupported(c.inner, "RMSNormOffset")
	}
	return c.real(a.RMSNormOffset(in[0], w, offset, eps))
}

func (c *stageContext) Scale(x compute.Tensor, s float32) compute.Tensor {
	rows, cols := x.Dims()
	return c.plain(rows, cols, func(in []compute.Tensor) compute.Tensor {
		a, ok := c.act()
		if !ok {
			return compute.Unsupported(c.inner, "Scale")
		}
		return a.Scale(in[0], s)
	}, x)
}

func (c *stageContext) SoftCap(x compute.Tensor, cp float32) compute.Tensor {
	rows, cols := x.Dims()
	return c.plain(rows, cols, func(in []compute.Tensor) compute.Tensor {
		a, ok := c.act()
		if !ok {
			return compute.Unsupported(c.inner, "SoftCap")
		}
		return a.SoftCap(in[0], cp)
	}, x)
}

func (c *stageContext) SigmoidMul(x, g compute.Tensor) compute.Tensor {
	rows, cols := x.Dims()
	return c.plain(rows, cols, func(in []compute.Tensor) compute.Tensor {
		a, ok := c.act()
		if !ok {
			return compute.Unsupported(c.inner, "SigmoidMul")
		}
		return a.SigmoidMul(in[0], in[1])
	}, x, g)
}

func (c *stageContext) CausalConv1D(x compute.Tensor, w compute.Weight, state []float32) compute.Tensor {
	rows, cols := x.Dims()
	in, ok := c.withWeights([]compute.Tensor{x}, w)
	if !ok {
		return c.void(rows, cols)
	}
	l, ok := c.lin()
	if !ok {
		return compute.Unsupported(c.inner, "CausalConv1D")
	}
	return c.real(l.CausalConv1D(in[0], w, state))
}

func (c *stageContext) GatedDelta(q, k, v, g, beta compute.Tensor, heads int, state []float32) compute.Tensor {
	rows, cols := v.Dims()
	return c.plain(rows, cols, func(in []compute.Tensor) compute.Tensor {
		l, ok := c.lin()
		if !ok {
			return compute.Unsupported(c.inner, "GatedDelta")
		}
		return l.GatedDelta(in[0], in[1], in[2], in[3], in[4], heads, state)
	}, q, k, v, g, beta)
}

func (c *stageContext) DeltaGates(a, b compute.Tensor, aLog, dtBias compute.Vector) (compute.Tensor, compute.Tensor) {
	rows, cols := a.Dims()
	in, ok := c.withWeights([]compute.Tensor{a, b}, aLog, dtBias)
	if !ok {
		return c.void(rows, cols), c.void(rows, cols)
	}
	l, ok := c.lin()
	if !ok {
		t := compute.Unsupported(c.inner, "DeltaGates")
		return t, t
	}
	g, beta := l.DeltaGates(in[0], in[1], aLog, dtBias)
	return c.real(g), c.real(beta)
}

func (c *stageContext) L2NormScale(x compute.Tensor, eps, s float32) compute.Tensor {
	rows, cols := x.Dims()
	return c.plain(rows, cols, func(in []compute.Tensor) compute.Tensor {
		l, ok := c.lin()
		if !ok {
			return compute.Unsupported(c.inner, "L2NormScale")
		}
		return l.L2NormScale(in[0], eps, s)
	}, x)
}

func (c *stageContext) Cols(x compute.Tensor, start, n int) compute.Tensor {
	rows, _ := x.Dims()
	return c.plain(rows, n, func(in []compute.Tensor) compute.Tensor {
		l, ok := c.lin()
		if !ok {
			return compute.Unsupported(c.inner, "Cols")
		}
		return l.Cols(in[0], start, n)
	}, x)
}

func (c *stageContext) ConcatCols(xs ...compute.Tensor) compute.Tensor {
	rows, cols := 0, 0
	for i, x := range xs {
		r, k := x.Dims()
		if i == 0 {
			rows = r
		}
		cols += k
	}
	return c.plain(rows, cols, func(in []compute.Tensor) compute.Tensor {
		l, ok := c.lin()
		if !ok {
			return compute.Unsupported(c.inner, "ConcatCols")
		}
		return l.ConcatCols(in...)
	}, xs...)
}

// ConcatRows and Segments are the batched passes' operations (compute.BatchContext).
func (c *stageContext) ConcatRows(xs ...compute.Tensor) compute.Tensor {
	rows, cols := 0, 0
	for i, x := range xs {
		r, k := x.Dims()
		if i == 0 {
			cols = k
		}
		rows += r
	}
	return c.plain(rows, cols, func(in []compute.Tensor) compute.Tensor {
		b, ok := compute.Ext[compute.BatchContext](c.inner)
		if !ok {
			return compute.Unsupported(c.inner, "ConcatRows")
		}
		return b.ConcatRows(in...)
	}, xs...)
}

func (c *stageContext) Segments(rows []int) {
	if b, ok := compute.Ext[compute.BatchContext](c.inner); ok {
		b.Segments(rows)
	}
}
