package metal

import (
	"fmt"
	"math"
	"slices"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
)

// The vision towers' operations (compute.VisionContext: Qwen3.5's ViT and Gemma 3's
// SigLIP, and the per-row rotary angles of the language model's M-RoPE) and Gemma 3's
// attention among an image's tokens (compute.SpanAttentionContext), built from MLX's
// operations. Everything here computes in float32, as the CPU backend does: a tower's
// activations are float32 (Linear widens its products), and its LayerNorm, GELU and
// attention are the reference's formulas.

var (
	_ compute.VisionContext        = (*context)(nil)
	_ compute.SpanAttentionContext = (*context)(nil)
	_ compute.Freer                = (*context)(nil)
)

// Free implements compute.Freer for the vision towers. A pass's graph holds every array
// it builds until the context closes, and MLX allocates an operation's result when it
// schedules it, up to tens of operations ahead of the ones running, freeing their inputs
// only once they have run: evaluated as one graph, a tower would hold every block's
// activations over all of an image's patches (gigabytes for one large image). So a pass
// that records a BlockAttention (a tower's) runs as the CPU backend does: each op is
// evaluated as it is built, its temporaries let go of (buildPending), and each Free is a
// barrier where every array the graph holds but the kept tensors is let go of (MLX frees
// those no later operation reads), the step's pending KV appends and recurrent states
// aside. The tower then holds at most what the CPU backend holds between two Frees, the
// step the memory plan's estimate counts (runner/*/vision_mem.go). A language model's
// passes record no BlockAttention, so there Free does nothing and a pass stays one
// evaluation.
func (c *context) Free(keep ...compute.Tensor) {
	if c.err != nil {
		return
	}
	ks, ok := c.args(keep...)
	if !ok {
		return
	}
	c.record(0, 0, func(g *graph) mlxArray {
		if !c.tower {
			return 0
		}
		live := make(map[mlxArray]bool, len(ks))
		arrs := make([]mlxArray, 0, len(ks))
		for _, t := range ks {
			if t.arr != 0 && !live[t.arr] {
				live[t.arr] = true
				arrs = append(arrs, t.arr)
			}
		}
		g.eval(arrs...)
		if g.err != nil {
			return 0
		}
		for _, p := range c.appends {
			live[p.k], live[p.v] = true, true
		}
		for _, s := range c.states {
			live[s.arr] = true
		}
		kept := g.owned[:0]
		for _, a := range g.owned {
			if live[a] {
				kept = append(kept, a)
			} else {
				g.l.arrayFree(a)
			}
		}
		clear(g.owned[len(kept):])
		g.owned = kept
		return 0
	})
}

// Input implements compute.VisionContext: data is copied when the op is recorded (the
// graph is built later, at Float32s, when the caller may have reused data).
func (c *context) Input(data []float32, rows, cols int) compute.Tensor {
	if c.err != nil {
		return nilTensor
	}
	if c.g == nil {
		return c.fail("the context is closed")
	}
	if rows <= 0 || cols <= 0 || len(data) != rows*cols {
		return c.fail("Input of %d values as %d×%d", len(data), rows, cols)
	}
	d := slices.Clone(data)
	return c.record(rows, cols, func(g *graph) mlxArray { return g.fromFloat32s(d, rows, cols) })
}

// LayerNorm implements compute.VisionContext with mlx.fast's layer_norm over the last
// axis (x rows × cols, w and b of cols float32 values).
func (c *context) LayerNorm(x compute.Tensor, w, b compute.Vector, eps float32) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	wv, ok1 := w.(*vector)
	bv, ok2 := b.(*vector)
	t := a[0]
	if !ok1 || !ok2 || wv.n != t.cols || bv.n != t.cols {
		return c.fail("LayerNorm of %d columns by weights of %d and %d (Metal vectors: %v, %v)", t.cols, w.Len(), b.Len(), ok1, ok2)
	}
	return c.record(t.rows, t.cols, func(g *graph) mlxArray {
		return g.layerNorm(g.astype(t.arr, dtFloat32), wv.a, bv.a, eps)
	})
}

// GELU implements compute.VisionContext: 0.5·x·(1 + erf(x/√2)), or the tanh form
// (geluTanh, which Gemma's GeGLU uses too).
func (c *context) GELU(x compute.Tensor, tanh bool) compute.Tensor {
	return c.unary("GELU", x, func(g *graph, a mlxArray) mlxArray {
		a = g.astype(a, dtFloat32)
		if tanh {
			return geluTanh(g, a)
		}
		e := g.erf(g.mul(a, g.scalar(float32(1/math.Sqrt2))))
		return g.mul(g.mul(g.add(e, g.scalar(1)), a), g.scalar(0.5)) // in place, as geluTanh
	})
}

// RoPERows implements compute.VisionContext: x (T × H·headDim) seen as [T, H, headDim],
// the pairs (j, j+half) of each head's first 2·half columns turned by row t's angle j
// (cos and sin T × half, broadcast over the heads as [T, 1, half]), the rest kept.
func (c *context) RoPERows(x, cos, sin compute.Tensor, headDim int) compute.Tensor {
	a, ok := c.args(x, cos, sin)
	if !ok {
		return nilTensor
	}
	t, ct, st := a[0], a[1], a[2]
	half := ct.cols
	if headDim <= 0 || t.cols%headDim != 0 || half <= 0 || ct.rows != t.rows || st.rows != t.rows || st.cols != half || 2*half > headDim {
		return c.fail("RoPERows of %d×%d (heads of %d) by angles of %d×%d and %d×%d", t.rows, t.cols, headDim, ct.rows, ct.cols, st.rows, st.cols)
	}
	T, H := t.rows, t.cols/headDim
	return c.record(T, t.cols, func(g *graph) mlxArray {
		x3 := g.reshape(g.astype(t.arr, dtFloat32), T, H, headDim)
		cs := g.reshape(g.astype(ct.arr, dtFloat32), T, 1, half)
		sn := g.reshape(g.astype(st.arr, dtFloat32), T, 1, half)
		x1 := g.slice(x3, []int{0, 0, 0}, []int{T, H, half})        // [T, H, half]
		x2 := g.slice(x3, []int{0, 0, half}, []int{T, H, 2 * half}) // [T, H, half]
		parts := []mlxArray{g.sub(g.mul(x1, cs), g.mul(x2, sn)), g.add(g.mul(x2, cs), g.mul(x1, sn))}
		if 2*half < headDim {
			parts = append(parts, g.slice(x3, []int{0, 0, 2 * half}, []int{T, H, headDim}))
		}
		return g.reshape(g.concat(2, parts...), T, t.cols)
	})
}

// towerScores bounds the attention scores BlockAttention holds at once (16 MiB of
// float32): runner/cpu's budget, the one the memory plan's tower estimates count
// (runner/*/vision_mem.go).
const towerScores = 1 << 22

// BlockAttention implements compute.VisionContext: for each block of n rows, each head
// and each chunk of the block's query rows, scores = scale·q·kᵀ (rows × n), their softmax
// along the block's keys, times v (rows × d): the head's columns of those rows. Float32
// throughout, with MLX's precise softmax.
//
// It holds what the CPU backend's does, which the memory plan counts: one head's keys
// (transposed) and values copied out of k and v, and the scores of min(n, towerScores/n)
// of its query rows (at least 4). Each chunk is evaluated, its rows written into the
// output in place, before the next is built: MLX, which allocates results ahead of the
// operations running, would otherwise hold many chunks' scores at once (a head's n² or
// more for an image of a few thousand patches).
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
	T, d := qt.rows, qt.cols/nHeads
	blocks = slices.Clone(blocks)
	c.tower = true
	return c.record(T, qt.cols, func(g *graph) mlxArray {
		fq, fk, fv := g.astype(qt.arr, dtFloat32), g.astype(kt.arr, dtFloat32), g.astype(vt.arr, dtFloat32)
		out := g.zeros(dtFloat32, T, qt.cols)
		s0 := 0
		for _, n := range blocks {
			if n == 0 {
				continue
			}
			rows := min(n, max(4, towerScores/n))
			for h := range nHeads {
				c0, c1 := h*d, (h+1)*d
				ks, vs := g.slice(fk, []int{s0, c0}, []int{s0 + n, c1}), g.slice(fv, []int{s0, c0}, []int{s0 + n, c1})
				kh, vh := g.contiguous(g.transpose(ks, 1, 0)), g.contiguous(vs) // d × n, n × d
				g.drop(ks, vs)
				for r := s0; r < s0+n; r += rows {
					e := min(r+rows, s0+n)
					qs := g.slice(fq, []int{r, c0}, []int{e, c1})
					qb := g.mul(qs, g.scalar(scale)) // rows × d
					sc := g.matmul(qb, kh)           // rows × n
					p := g.softmax(sc, -1)
					o := g.matmul(p, vh) // rows × d
					next := g.sliceUpdate(out, o, []int{r, c0}, []int{e, c1})
					// Once this context lets go of them, the evaluation frees the chunk's
					// scores and writes its rows into out in place.
					g.drop(qs, qb, sc, p, o, out)
					out = next
					g.eval(out)
				}
				g.drop(kh, vh)
			}
			s0 += n
		}
		return out
	})
}

// AttentionSpans implements compute.SpanAttentionContext: Attention whose mask lets the
// rows of each span see the span's later rows too (spanView), over the cache's blocks
// where they lie, or through kvstore's own kernels for a storage MLX does not read.
func (c *context) AttentionSpans(q, k, v compute.Tensor, cache kvstore.Layer, nHeads int, scale float32, spans []kvstore.Span) compute.Tensor {
	if c.err != nil {
		return nilTensor
	}
	spans, err := checkSpans(spans)
	if err != nil {
		return c.fail("AttentionSpans: %v", err)
	}
	return c.attention("AttentionSpans", q, k, v, cache, nHeads, scale, nil, nil, spans)
}

// checkSpans returns spans as a pass records them: nil for none (plain causal attention),
// else a copy (the graph reads them when it is evaluated), refused unless in order and
// apart.
func checkSpans(spans []kvstore.Span) ([]kvstore.Span, error) {
	prev := 0
	for _, s := range spans {
		if s.Start < prev || s.End <= s.Start {
			return nil, fmt.Errorf("spans %v are not in order and apart", spans)
		}
		prev = s.End
	}
	if len(spans) == 0 {
		return nil, nil
	}
	return slices.Clone(spans), nil
}

// spanView is what each of T query rows at positions first..first+T-1 sees with the
// bidirectional spans (kvstore's rule, spans.go): positions lo[t]..last[t]. A row outside
// every span sees its causal view, p-window+1 (0 without a window) to p; a row at p
// inside a span [s, e) also sees the span's later rows, up to e-1, and with a window
// every row of the span, from min(p-window+1, s). Spans must be in order and apart, and
// end within first+T (their rows are in the cache once this pass's are appended).
func spanView(first, T, window int, spans []kvstore.Span) (lo, last []int32, err error) {
	end := first + T
	prev := 0
	for _, s := range spans {
		if s.Start < prev || s.End <= s.Start || s.End > end {
			return nil, nil, fmt.Errorf("metal: bidirectional spans %v are not in order and apart within the %d positions attended", spans, end)
		}
		prev = s.End
	}
	lo, last = make([]int32, T), make([]int32, T)
	k := 0
	for t := range T {
		p := first + t
		causal := 0
		if window > 0 {
			causal = max(0, p-window+1)
		}
		lo[t], last[t] = int32(causal), int32(p)
		for k < len(spans) && spans[k].End <= p {
			k++
		}
		if k < len(spans) && spans[k].Start <= p {
			s := spans[k]
			last[t] = int32(s.End - 1)
			if window > 0 {
				lo[t] = int32(min(causal, s.Start))
			}
		}
	}
	return lo, last, nil
}

func (g *graph) layerNorm(x, w, b mlxArray, eps float32) mlxArray {
	return g.call("mlx_fast_layer_norm", func(r *mlxArray) int32 { return g.l.layerNorm(r, x, w, b, eps, g.s) })
}

// drop lets go of arrays whose only use is as inputs of operations already recorded:
// MLX keeps them for those operations and frees them after, instead of the graph holding
// them until the context closes.
func (g *graph) drop(as ...mlxArray) {
	if g.err != nil {
		return
	}
	for _, a := range as {
		g.l.arrayFree(g.keep(a))
	}
}
