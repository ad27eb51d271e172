package pipeline

import (
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
)

// The language model's side of image input on a stage (compute.VisionContext,
// compute.SpanAttentionContext): rank 0 embeds the image rows (model.Batch.EmbedWith puts
// the features in), and every rank rotates its layers' rows at their M-RoPE positions and
// lets an image's rows see each other, from the media places each pass's message carries
// (Message.Media). The tower itself runs outside the stage context, on rank 0's backend.

func (c *stageContext) vision() (compute.VisionContext, bool) {
	return compute.Ext[compute.VisionContext](c.inner)
}

// Input is real on every rank: a pass's rotary angles are made where the layers run.
func (c *stageContext) Input(data []float32, rows, cols int) compute.Tensor {
	v, ok := c.vision()
	if !ok {
		return compute.Unsupported(c.inner, "image input")
	}
	return c.real(v.Input(data, rows, cols))
}

func (c *stageContext) LayerNorm(x compute.Tensor, w, b compute.Vector, eps float32) compute.Tensor {
	rows, cols := x.Dims()
	in, ok := c.withWeights([]compute.Tensor{x}, w, b)
	if !ok {
		return c.void(rows, cols)
	}
	v, ok := c.vision()
	if !ok {
		return compute.Unsupported(c.inner, "LayerNorm")
	}
	return c.real(v.LayerNorm(in[0], w, b, eps))
}

func (c *stageContext) GELU(x compute.Tensor, tanh bool) compute.Tensor {
	rows, cols := x.Dims()
	return c.plain(rows, cols, func(in []compute.Tensor) compute.Tensor {
		v, ok := c.vision()
		if !ok {
			return compute.Unsupported(c.inner, "GELU")
		}
		return v.GELU(in[0], tanh)
	}, x)
}

func (c *stageContext) RoPERows(x, cos, sin compute.Tensor, headDim int) compute.Tensor {
	rows, cols := x.Dims()
	return c.plain(rows, cols, func(in []compute.Tensor) compute.Tensor {
		v, ok := c.vision()
		if !ok {
			return compute.Unsupported(c.inner, "RoPERows")
		}
		return v.RoPERows(in[0], in[1], in[2], headDim)
	}, x, cos, sin)
}

func (c *stageContext) BlockAttention(q, k, v compute.Tensor, heads int, scale float32, blocks []int) compute.Tensor {
	rows, cols := q.Dims()
	return c.plain(rows, cols, func(in []compute.Tensor) compute.Tensor {
		vc, ok := c.vision()
		if !ok {
			return compute.Unsupported(c.inner, "BlockAttention")
		}
		return vc.BlockAttention(in[0], in[1], in[2], heads, scale, blocks)
	}, q, k, v)
}

// AttentionSpans is Attention (stage.go) with an image's rows seeing each other: skipped
// on a layer another rank holds, run by the inner context on this rank's.
func (c *stageContext) AttentionSpans(q, k, v compute.Tensor, cache kvstore.Layer, heads int, scale float32, spans []kvstore.Span) compute.Tensor {
	return c.attend(q, k, v, cache, func(in []compute.Tensor) compute.Tensor {
		sc, ok := compute.Ext[compute.SpanAttentionContext](c.inner)
		if !ok {
			return compute.Unsupported(c.inner, "attention among an image's tokens")
		}
		return sc.AttentionSpans(in[0], in[1], in[2], cache, heads, scale, spans)
	})
}
