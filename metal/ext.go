package metal

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/mlxg/mlxg/runner/compute"
)

// The optional operations of the mixture-of-experts, Gemma and Gated DeltaNet
// architectures (compute.MoEContext, ActivationContext, LinearAttentionContext), built
// from MLX's own operations. A fused Metal kernel for the gated delta rule may replace
// its per-step loop later; the result must stay what this file computes.

var (
	_ compute.MoEContext             = (*context)(nil)
	_ compute.GeGLUMoEContext        = (*context)(nil)
	_ compute.SigmoidMoEContext      = (*context)(nil)
	_ compute.ClampedMoEContext      = (*context)(nil)
	_ compute.SharedKVContext        = (*context)(nil)
	_ compute.SinkAttentionContext   = (*context)(nil)
	_ compute.SpanAttentionContext   = (*context)(nil)
	_ compute.ActivationContext      = (*context)(nil)
	_ compute.LinearAttentionContext = (*context)(nil)
	_ compute.Failer                 = (*context)(nil)
)

// Fail implements compute.Failer.
func (c *context) Fail(err error) compute.Tensor {
	if c.err == nil {
		c.err = err
	}
	return nilTensor
}

// MoE implements compute.MoEContext. The router picks each token's experts on the
// device (route: softmax or sigmoid, top-k by argpartition) and gather_qmm (gather_mm
// for float weights) multiplies each token by its picked experts' matrices only, so
// experts nobody picked are never read.
func (c *context) MoE(x, router compute.Tensor, gate, up, down compute.Weight, experts int, r compute.Routing) compute.Tensor {
	return c.moe(x, router, gate, up, down, experts, r, expertAct{})
}

// GeGLUMoE implements compute.GeGLUMoEContext: MoE with Gemma 4's GELU-gated experts.
func (c *context) GeGLUMoE(x, router compute.Tensor, gate, up, down compute.Weight, experts int, r compute.Routing) compute.Tensor {
	return c.moe(x, router, gate, up, down, experts, r, expertAct{geglu: true})
}

// SigmoidMoE implements compute.SigmoidMoEContext: MoE whose router is DeepSeek-V3's
// (route applies the correction bias, the groups and the scale).
func (c *context) SigmoidMoE(x, router compute.Tensor, gate, up, down compute.Weight, experts int, r compute.Routing) compute.Tensor {
	if !r.Sigmoid {
		return c.fail("SigmoidMoE: the routing is not a sigmoid router")
	}
	return c.moe(x, router, gate, up, down, experts, r, expertAct{})
}

// ClampedMoE implements compute.ClampedMoEContext: MoE with gpt-oss's clamped SwiGLU;
// each picked expert's rows of the stacks' biases are added to its products
// (expertProduct).
func (c *context) ClampedMoE(x, router compute.Tensor, gate, up, down compute.Weight, experts int, r compute.Routing, act compute.ClampedSwiGLU) compute.Tensor {
	return c.moe(x, router, gate, up, down, experts, r, expertAct{clamped: &act})
}

// expertAct is the experts' activation of gate and up: SiLU's (SwiGLU) unless one of
// the others is set.
type expertAct struct {
	geglu   bool                   // gelu_tanh(gate)·up (Gemma 4)
	clamped *compute.ClampedSwiGLU // gpt-oss's
}

// apply computes the activation of the gate and up products (T × k × 1 × inter).
func (a expertAct) apply(g *graph, gate, up mlxArray) mlxArray {
	switch {
	case a.clamped != nil:
		// In float32, as compute.ClampedSwiGLU.Apply: min(gate, L)·σ(α·min(gate, L))·
		// (clamp(up, -L, L) + 1).
		lim := a.clamped.Limit
		gt := g.minimum(g.astype(gate, dtFloat32), g.scalar(lim))
		u := g.maximum(g.minimum(g.astype(up, dtFloat32), g.scalar(lim)), g.scalar(-lim))
		glu := g.mul(gt, g.sigmoid(g.mul(gt, g.scalar(a.clamped.Alpha))))
		return g.mul(glu, g.add(u, g.scalar(1)))
	case a.geglu:
		return g.mul(geluTanh(g, gate), up)
	}
	return g.mul(g.silu(gate), up)
}

// moe is the mixture of experts whose experts' activation is act.
func (c *context) moe(x, router compute.Tensor, gate, up, down compute.Weight, experts int, r compute.Routing, act expertAct) compute.Tensor {
	a, ok := c.args(x, router)
	if !ok {
		return nilTensor
	}
	gw, ok1 := gate.(*weight)
	uw, ok2 := up.(*weight)
	dw, ok3 := down.(*weight)
	if !ok1 || !ok2 || !ok3 {
		return c.fail("MoE: weights are not Metal weights")
	}
	xs, rl := a[0], a[1]
	T, in := xs.rows, xs.cols
	d := compute.DimsOf
	_, hidden, err := compute.MoEShape(d(xs), d(rl), d(gw), d(uw), d(dw), experts, r)
	if err != nil {
		return c.fail("%v", err)
	}
	k := r.TopK
	grp := streamGroup(gw, uw, dw)
	if grp == nil && (gw.stream != nil || uw.stream != nil || dw.stream != nil) {
		return c.fail("MoE: %q, %q and %q are not one layer's three streamed expert stacks", gw.name, uw.name, dw.name)
	}
	return c.record(T, hidden, func(g *graph) mlxArray {
		idx, scores := route(g, rl.arr, T, experts, r) // T × k each: expert ids, weights
		xe := g.reshape(g.astype(xs.arr, gw.dt), T, 1, 1, in)
		product := func(w *weight, x mlxArray) mlxArray { return expertProduct(g, w, x, idx, experts) }
		if grp != nil {
			// The picks come to the host: the experts not in the layer's slots are read
			// into slots, and gather_qmm runs over the slots by slot index.
			picks := g.readIndices(idx)
			if g.err != nil {
				return 0
			}
			stacks, slots, err := grp.prepare(c.b, g, picks, k)
			if err != nil {
				return g.fail(fmt.Errorf("MoE: %w", err))
			}
			sidx := g.fromData(unsafe.Pointer(&slots[0]), dtUint32, T, k)
			product = func(w *weight, x mlxArray) mlxArray {
				a := stacks[w.stream.pos]
				y := g.gatherQMM(x, a[0], a[1], a[2], sidx, w.q.GroupSize, w.q.Bits, string(w.q.Mode))
				return addExpertBias(g, w, y, idx, experts) // by expert id, not slot
			}
		}
		h := act.apply(g, product(gw, xe), product(uw, xe)) // T × k × 1 × inter
		y := product(dw, g.astype(h, dw.dt))                // T × k × 1 × hidden
		y = g.reshape(g.astype(y, dtFloat32), T, k, hidden)
		return g.sum(g.mul(y, g.reshape(scores, T, k, 1)), 1, false)
	})
}

// route picks each token's experts from the router's logits (T × experts) on the
// device, as compute.Routing.Select does on the host: idx (T × k, uint32) holds the
// picked experts, in no particular order, and weights (T × k, float32) their weights.
// Ties between equal scores may pick another of them than Select's lower index.
func route(g *graph, logits mlxArray, T, experts int, r compute.Routing) (idx, weights mlxArray) {
	k := r.TopK
	// topK is the indices of the k largest of v (T × n) along its last axis: the first
	// k of an argpartition of -v at k-1.
	topK := func(v mlxArray, k, n int) mlxArray {
		i := g.argpartition(g.neg(v), k-1, -1)
		if k < n {
			i = g.slice(i, []int{0, 0}, []int{T, k})
		}
		return i
	}
	lg := g.astype(logits, dtFloat32)
	if r.Sigmoid {
		scores := g.sigmoid(lg) // T × E, the weights' source
		choice := scores        // T × E, what the experts are chosen by
		if r.Bias != nil {
			choice = g.add(scores, g.reshape(g.fromFloat32s(r.Bias, experts), 1, experts))
		}
		if G := r.Groups; G > 1 && experts%G == 0 && r.TopKGroups < G {
			size := experts / G
			c3 := g.reshape(choice, T, G, size)
			// A group's score: the sum of its two best biased scores (T × G).
			two := g.slice(g.argpartition(g.neg(c3), 1, -1), []int{0, 0, 0}, []int{T, G, 2})
			gs := g.sum(g.takeAlong(c3, two, -1), -1, false)
			// The TopKGroups-th best group score (T × 1): groups below it drop out.
			nth := g.argpartition(g.neg(gs), r.TopKGroups-1, -1)
			nth = g.slice(nth, []int{0, r.TopKGroups - 1}, []int{T, r.TopKGroups})
			drop := g.greater(g.takeAlong(gs, nth, -1), gs) // T × G
			c3 = g.where(g.reshape(drop, T, G, 1), g.scalar(negInf), c3)
			choice = g.reshape(c3, T, experts)
		}
		idx = topK(choice, k, experts)
		weights = g.takeAlong(scores, idx, -1)
		if r.NormTopK {
			weights = g.div(weights, g.add(g.sum(weights, -1, true), g.scalar(1e-20)))
		}
		if r.Scale != 0 && r.Scale != 1 {
			weights = g.mul(weights, g.scalar(r.Scale))
		}
		return idx, weights
	}
	if r.SoftmaxTopK {
		// gpt-oss: the k largest logits, then the softmax over those alone.
		idx = topK(lg, k, experts)
		weights = g.softmax(g.takeAlong(lg, idx, -1), -1)
	} else {
		probs := g.softmax(lg, -1)
		idx = topK(probs, k, experts)
		weights = g.takeAlong(probs, idx, -1)
	}
	if r.NormTopK {
		weights = g.div(weights, g.sum(weights, -1, true))
	}
	if r.Scales != nil {
		// Each picked expert's scale: Scales[idx] (take over the flat vector keeps idx's
		// shape, T × k).
		weights = g.mul(weights, g.takeAxis(g.fromFloat32s(r.Scales, experts), idx, 0))
	}
	return idx, weights
}

// expertProduct is x (T × 1 × 1 × in) times the expert matrices of w picked by idx
// (T × k), plus the picked experts' rows of w's biases when the stack has them
// ([experts, rows], gpt-oss): T × k × 1 × rows.
func expertProduct(g *graph, w *weight, x, idx mlxArray, experts int) mlxArray {
	rows := w.out / experts
	stack := func(a mlxArray) mlxArray {
		shape := g.shape(a)
		if g.err != nil || len(shape) != 2 {
			return g.fail(errShape("an expert stack", shape))
		}
		return g.reshape(a, experts, rows, shape[1])
	}
	var y mlxArray
	if w.q.Quantized() {
		var biases mlxArray
		if w.biases != 0 {
			biases = stack(w.biases)
		}
		y = g.gatherQMM(x, stack(w.w), stack(w.scales), biases, idx, w.q.GroupSize, w.q.Bits, string(w.q.Mode))
	} else {
		y = g.gatherMM(x, g.transpose(stack(w.w), 0, 2, 1), idx)
	}
	return addExpertBias(g, w, y, idx, experts)
}

// addExpertBias adds to y (T × k × 1 × rows, the products of the experts idx picked) each
// picked expert's row of w's biases ([experts, rows], gpt-oss), when w has them.
func addExpertBias(g *graph, w *weight, y, idx mlxArray, experts int) mlxArray {
	if w.bias == 0 {
		return y
	}
	rows := w.out / experts
	shape := g.shape(idx) // T × k
	if g.err != nil || len(shape) != 2 {
		return g.fail(errShape("the experts' picks", shape))
	}
	b := g.takeAxis(g.reshape(w.bias, experts, rows), idx, 0) // T × k × rows, float32
	return g.add(g.astype(y, dtFloat32), g.reshape(b, shape[0], shape[1], 1, rows))
}

// GeGLU implements compute.ActivationContext: gelu_tanh(gate) * up.
func (c *context) GeGLU(gate, up compute.Tensor) compute.Tensor {
	return c.elementwise("GeGLU", gate, up, func(g *graph, x, u mlxArray) mlxArray { return g.mul(geluTanh(g, x), u) })
}

// geluTanh is gelu_pytorch_tanh: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
func geluTanh(g *graph, x mlxArray) mlxArray {
	inner := g.mul(g.add(x, g.mul(g.mul(g.square(x), x), g.scalar(0.044715))), g.scalar(float32(math.Sqrt(2/math.Pi))))
	// (1 + tanh)·x, then halved (exactly): each step reads the one before, which MLX then
	// overwrites in place, so over a tower's activations the chain holds one tensor
	// beside x, not a second for 0.5·x.
	return g.mul(g.mul(g.add(g.tanh(inner), g.scalar(1)), x), g.scalar(0.5))
}

// RMSNormOffset implements compute.ActivationContext.
func (c *context) RMSNormOffset(x compute.Tensor, w compute.Vector, offset, eps float32) compute.Tensor {
	return c.rmsNorm("RMSNormOffset", x, w, eps, func(g *graph, w mlxArray) mlxArray { return g.add(w, g.scalar(offset)) })
}

// Scale implements compute.ActivationContext.
func (c *context) Scale(x compute.Tensor, s float32) compute.Tensor {
	return c.unary("Scale", x, func(g *graph, a mlxArray) mlxArray { return g.mul(a, g.scalar(s)) })
}

// Clamp implements compute.ClampContext.
func (c *context) Clamp(x compute.Tensor, lo, hi float32) compute.Tensor {
	return c.unary("Clamp", x, func(g *graph, a mlxArray) mlxArray {
		return g.minimum(g.maximum(a, g.scalar(lo)), g.scalar(hi))
	})
}

// SoftCap implements compute.ActivationContext.
func (c *context) SoftCap(x compute.Tensor, cp float32) compute.Tensor {
	if cp <= 0 {
		return c.fail("SoftCap: the cap must be positive, got %v", cp)
	}
	return c.unary("SoftCap", x, func(g *graph, a mlxArray) mlxArray {
		return g.mul(g.tanh(g.mul(a, g.scalar(1/cp))), g.scalar(cp))
	})
}

// SigmoidMul implements compute.ActivationContext.
func (c *context) SigmoidMul(x, gt compute.Tensor) compute.Tensor {
	a, ok := c.args(x, gt)
	if !ok {
		return nilTensor
	}
	xs, gs := a[0], a[1]
	if gs.rows != xs.rows || gs.cols <= 0 || xs.cols%gs.cols != 0 {
		return c.fail("SigmoidMul of %d×%d by a gate of %d×%d", xs.rows, xs.cols, gs.rows, gs.cols)
	}
	group := xs.cols / gs.cols
	return c.record(xs.rows, xs.cols, func(g *graph) mlxArray {
		x3 := g.reshape(xs.arr, xs.rows, gs.cols, group)
		g3 := g.reshape(g.sigmoid(gs.arr), gs.rows, gs.cols, 1)
		return g.reshape(g.mul(x3, g3), xs.rows, xs.cols)
	})
}

func (c *context) unary(op string, x compute.Tensor, fn func(g *graph, a mlxArray) mlxArray) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	return c.record(a[0].rows, a[0].cols, func(g *graph) mlxArray { return fn(g, a[0].arr) })
}

// stateWrite is a recurrent state computed on the device, copied back into the Go
// slice the layer keeps (kvstore.Recurrent) once the step is evaluated.
type stateWrite struct {
	arr mlxArray // float32, len(dst) elements
	dst []float32
}

// CausalConv1D implements compute.LinearAttentionContext.
func (c *context) CausalConv1D(x compute.Tensor, w compute.Weight, state []float32) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	cw, ok := w.(*weight)
	if !ok || cw.q.Quantized() {
		return c.fail("CausalConv1D: the kernel must be an unquantized Metal weight")
	}
	xs := a[0]
	T, C := xs.rows, xs.cols
	K, err := compute.ConvShape(compute.DimsOf(xs), cw.out*cw.in, len(state))
	if err != nil {
		return c.fail("%v", err)
	}
	return c.record(T, C, func(g *graph) mlxArray {
		xp := xs.arr // x' = the state's K-1 rows, then x
		if K > 1 {
			xp = g.concat(0, g.fromFloat32s(state, K-1, C), xs.arr)
		}
		taps := g.transpose(g.reshape(g.astype(cw.w, dtFloat32), C, K), 1, 0) // K × C
		var out mlxArray
		for j := 0; j < K; j++ {
			term := g.mul(g.slice(xp, []int{j, 0}, []int{j + T, C}), g.slice(taps, []int{j, 0}, []int{j + 1, C}))
			if j == 0 {
				out = term
			} else {
				out = g.add(out, term)
			}
		}
		if K > 1 {
			c.states = append(c.states, stateWrite{g.slice(xp, []int{T, 0}, []int{T + K - 1, C}), state})
		}
		return g.silu(out)
	})
}

// GatedDelta implements compute.LinearAttentionContext: the recurrent form, one step
// per position, all heads at once.
func (c *context) GatedDelta(q, k, v, gt, beta compute.Tensor, heads int, state []float32) compute.Tensor {
	a, ok := c.args(q, k, v, gt, beta)
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
	rep, H := heads/kHeads, heads
	return c.record(T, H*dv, func(g *graph) mlxArray {
		// Value head h reads key head h/rep: repeat q and k per value head.
		perHead := func(x mlxArray) mlxArray {
			x = g.broadcastTo(g.reshape(x, T, kHeads, 1, dk), T, kHeads, rep, dk)
			return g.reshape(x, T, H, dk)
		}
		qh, kh := perHead(qs.arr), perHead(ks.arr)
		vh := g.reshape(vs.arr, T, H, dv)
		decay := g.exp(gs.arr) // T × H
		S := g.fromFloat32s(state, H, dk, dv)
		outs := make([]mlxArray, T)
		for t := 0; t < T; t++ {
			at := func(x mlxArray, d int) mlxArray { return g.slice(x, []int{t, 0, 0}, []int{t + 1, H, d}) }
			qt := g.reshape(at(qh, dk), H, 1, dk)
			kt := g.reshape(at(kh, dk), H, 1, dk)
			vt := g.reshape(at(vh, dv), H, 1, dv)
			dt := g.reshape(g.slice(decay, []int{t, 0}, []int{t + 1, H}), H, 1, 1)
			bt := g.reshape(g.slice(bs.arr, []int{t, 0}, []int{t + 1, H}), H, 1, 1)
			S = g.mul(S, dt)
			mem := g.matmul(kt, S)                                  // Sᵀk: H × 1 × dv
			delta := g.mul(g.sub(vt, mem), bt)                      // β(v − Sᵀk)
			S = g.add(S, g.matmul(g.transpose(kt, 0, 2, 1), delta)) // + k ⊗ delta
			outs[t] = g.matmul(qt, S)                               // Sᵀq: H × 1 × dv
		}
		c.states = append(c.states, stateWrite{S, state})
		out := outs[0]
		if T > 1 {
			out = g.concat(1, outs...) // H × T × dv
		}
		return g.reshape(g.transpose(out, 1, 0, 2), T, H*dv)
	})
}

// DeltaGates implements compute.LinearAttentionContext.
func (c *context) DeltaGates(at, bt compute.Tensor, aLog, dtBias compute.Vector) (compute.Tensor, compute.Tensor) {
	a, ok := c.args(at, bt)
	if !ok {
		return nilTensor, nilTensor
	}
	al, ok1 := aLog.(*vector)
	db, ok2 := dtBias.(*vector)
	H := a[0].cols
	if !ok1 || !ok2 || al.n != H || db.n != H || a[1].cols != H || a[1].rows != a[0].rows {
		return c.fail("DeltaGates: a %d×%d, b %d×%d, A_log of %d and dt_bias of %d values", a[0].rows, a[0].cols, a[1].rows, a[1].cols, aLog.Len(), dtBias.Len()), nilTensor
	}
	g := c.record(a[0].rows, H, func(g *graph) mlxArray {
		return g.mul(g.neg(g.exp(al.a)), g.softplus(g.add(a[0].arr, db.a)))
	})
	beta := c.record(a[1].rows, H, func(g *graph) mlxArray { return g.sigmoid(a[1].arr) })
	return g, beta
}

// L2NormScale implements compute.LinearAttentionContext.
func (c *context) L2NormScale(x compute.Tensor, eps, s float32) compute.Tensor {
	return c.unary("L2NormScale", x, func(g *graph, a mlxArray) mlxArray {
		inv := g.rsqrt(g.add(g.sum(g.square(a), -1, true), g.scalar(eps)))
		return g.mul(g.mul(a, inv), g.scalar(s))
	})
}

// Cols implements compute.LinearAttentionContext.
func (c *context) Cols(x compute.Tensor, start, n int) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	xs := a[0]
	if start < 0 || n <= 0 || start+n > xs.cols {
		return c.fail("Cols %d..%d of a tensor of %d columns", start, start+n, xs.cols)
	}
	return c.record(xs.rows, n, func(g *graph) mlxArray {
		return g.slice(xs.arr, []int{0, start}, []int{xs.rows, start + n})
	})
}

// ConcatCols implements compute.LinearAttentionContext.
func (c *context) ConcatCols(xs ...compute.Tensor) compute.Tensor {
	a, ok := c.args(xs...)
	if !ok || len(a) == 0 {
		return c.fail("ConcatCols of no tensors")
	}
	cols, err := compute.ConcatShape(dims(a), false)
	if err != nil {
		return c.fail("%v", err)
	}
	return c.record(a[0].rows, cols, func(g *graph) mlxArray {
		arrs := make([]mlxArray, len(a))
		for i, t := range a {
			arrs[i] = t.arr
		}
		return g.concat(1, arrs...)
	})
}
