package cpu

import (
	"errors"
	"math"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/residency"
)

// expert returns a view of rows e*rows .. (e+1)*rows-1 of a stacked expert matrix,
// sharing its memory: only those rows are read by a product with it.
func (w *weight) expert(e, rows int) *weight {
	v := &weight{name: w.name, out: rows, in: w.in, q: w.q}
	lo, hi := e*rows, (e+1)*rows
	v.bias = w.expertBias(e, rows)
	if !w.q.Quantized() {
		v.f = w.f[lo*w.in : hi*w.in]
		return v
	}
	wpr, gpr := quant.Words(w.in, w.q.Bits), w.in/w.q.GroupSize
	v.packed = w.packed[lo*wpr : hi*wpr]
	v.scales = w.scales.Slice(lo*gpr, hi*gpr)
	if w.biases.Len() > 0 {
		v.biases = w.biases.Slice(lo*gpr, hi*gpr)
	}
	return v
}

// expertBias is expert e's row of a stacked matrix's biases ([experts, rows], gpt-oss),
// nil when it has none.
func (w *weight) expertBias(e, rows int) []float32 {
	if w.bias == nil {
		return nil
	}
	return w.bias[e*rows : (e+1)*rows]
}

// deferLimit bounds the outputs a streamed MoE keeps to add up in order (floats): a
// decode step's few picks are computed hits first; a prompt's are computed in order.
var deferLimit = 1 << 20

// pick is one token's use of an expert, with its routing weight.
type pick struct {
	token int
	w     float32
}

// streamWindow is how many of a layer's picked experts are read ahead of the one the
// product waits for, when they are streamed: enough to keep the manager's readers busy.
const streamWindow = 4

// MoE implements compute.MoEContext. Tokens are grouped by expert, so each picked
// expert's weights are read once per call, and experts nobody picked are not read.
func (c *context) MoE(x, router compute.Tensor, gate, up, down compute.Weight, experts int, r compute.Routing) compute.Tensor {
	return c.moe(x, router, gate, up, down, experts, r, quant.SwiGLU)
}

// GeGLUMoE implements compute.GeGLUMoEContext: MoE with Gemma's GELU-gated experts.
func (c *context) GeGLUMoE(x, router compute.Tensor, gate, up, down compute.Weight, experts int, r compute.Routing) compute.Tensor {
	return c.moe(x, router, gate, up, down, experts, r, func(out, g, u []float32) {
		u = u[:len(g)]
		for i, v := range g {
			out[i] = geluTanh(v) * u[i]
		}
	})
}

// ClampedMoE implements compute.ClampedMoEContext: MoE with gpt-oss's activation; the
// experts' biases are their weights' (expert, fromUnit).
func (c *context) ClampedMoE(x, router compute.Tensor, gate, up, down compute.Weight, experts int, r compute.Routing, act compute.ClampedSwiGLU) compute.Tensor {
	return c.moe(x, router, gate, up, down, experts, r, act.Apply)
}

// moe is the mixture of experts whose experts' activation act writes act(gate, up)
// into out.
func (c *context) moe(x, router compute.Tensor, gate, up, down compute.Weight, experts int, r compute.Routing, act func(out, gate, up []float32)) compute.Tensor {
	a, ok := c.args(x, router)
	if !ok {
		return nilTensor
	}
	g, ok1 := gate.(*weight)
	u, ok2 := up.(*weight)
	d, ok3 := down.(*weight)
	if !ok1 || !ok2 || !ok3 {
		return c.fail("MoE: weights are not CPU weights")
	}
	xs, rl := a[0], a[1]
	T, in := xs.rows, xs.cols
	dm := compute.DimsOf
	inter, hidden, err := compute.MoEShape(dm(xs), dm(rl), dm(g), dm(u), dm(d), experts, r)
	if err != nil {
		return c.fail("%v", err)
	}
	byExpert := make([][]pick, experts)
	for t := 0; t < T; t++ {
		es, ws := r.Select(rl.data[t*experts : (t+1)*experts])
		for i, e := range es {
			byExpert[e] = append(byExpert[e], pick{t, ws[i]})
		}
	}
	seg := c.segmentOf(T)
	out := c.newTensor(T, hidden)
	clear(out.data)
	var bufs [][]float32
	defer func() { c.b.release(bufs) }()
	get := func(n int) []float32 {
		buf := c.b.alloc(n)
		bufs = append(bufs, buf)
		return buf
	}
	order := make([]int, 0, experts) // the experts with picks, in the order they are computed
	total := 0
	for e, picks := range byExpert {
		if len(picks) > 0 {
			order = append(order, e)
			total += len(picks)
		}
	}
	grp := streamGroup(g, u, d)
	// deferred: with streamed experts and few picks (decode), the experts in memory are
	// computed first, while the others are read, and the outputs are added up in the
	// experts' order afterwards, so the sum is the same as the mapped path's.
	deferred := grp != nil && total*hidden <= deferLimit
	var ys [][]float32
	if grp != nil {
		grp.begin(order)
		last, _ := r.Select(rl.data[(T-1)*experts : T*experts])
		defer grp.end(last)
		mgr := grp.st.mgr
		if deferred {
			ys = make([][]float32, experts)
			var missing []int
			hot, cold := order[:0:0], []int(nil)
			for _, e := range order {
				if mgr.Resident(grp.units[e]) {
					hot = append(hot, e)
				} else {
					cold = append(cold, e)
					missing = append(missing, grp.units[e])
				}
			}
			order = append(hot, cold...)
			mgr.Want(missing...)
			c.expectGuessed(grp)
		} else {
			ids := make([]int, 0, streamWindow)
			for _, e := range order[:min(streamWindow, len(order))] {
				ids = append(ids, grp.units[e])
			}
			mgr.Want(ids...)
			c.expectGuessed(grp)
		}
	}
	var kept [][]float32 // the deferred outputs' buffers
	defer func() { c.b.release(kept) }()
	for k, e := range order {
		picks := byExpert[e]
		n := len(picks)
		var ge, ue, de *weight
		var held residency.Handle
		if grp != nil {
			if j := k + streamWindow; !deferred && j < len(order) {
				grp.st.mgr.Want(grp.units[order[j]])
			}
			var err error
			if held, err = grp.st.mgr.AcquireUses(grp.units[e], n); err != nil {
				return c.fail("MoE: %v", err)
			}
			var e1, e2, e3 error
			ge, e1 = g.fromUnit(held, get)
			ue, e2 = u.fromUnit(held, get)
			de, e3 = d.fromUnit(held, get)
			if err := errors.Join(e1, e2, e3); err != nil {
				held.Release()
				return c.fail("MoE: %v", err)
			}
			ge.bias, ue.bias, de.bias = g.expertBias(e, inter), u.expertBias(e, inter), d.expertBias(e, hidden)
		} else {
			ge, ue, de = g.expert(e, inter), u.expert(e, inter), d.expert(e, hidden)
		}
		xe := get(n * in)
		var bySeg []int // in a batched pass, the picks of each sequence (batch.go)
		if seg != nil {
			bySeg = make([]int, len(c.segs))
		}
		for i, p := range picks {
			copy(xe[i*in:(i+1)*in], xs.data[p.token*in:(p.token+1)*in])
			if seg != nil {
				bySeg[seg[p.token]]++
			}
		}
		h, hu := get(n*inter), get(n*inter)
		var y []float32
		if deferred {
			y = c.b.alloc(n * hidden)
			kept = append(kept, y)
			ys[e] = y
		} else {
			y = get(n * hidden)
		}
		c.moeLinear(h, xe, n, ge, bySeg)
		c.moeLinear(hu, xe, n, ue, bySeg)
		act(h, h, hu)
		c.moeLinear(y, h, n, de, bySeg)
		if grp != nil {
			held.Release()
		}
		if !deferred {
			addPicks(out.data, y, picks, hidden)
		}
		c.b.release(bufs)
		bufs = bufs[:0]
	}
	for e, y := range ys {
		if y != nil {
			addPicks(out.data, y, byExpert[e], hidden)
		}
	}
	return out
}

// addPicks adds each pick's weighted row of y to its token's output row.
func addPicks(out, y []float32, picks []pick, hidden int) {
	for i, p := range picks {
		o := out[p.token*hidden : (p.token+1)*hidden]
		for j, v := range y[i*hidden : (i+1)*hidden] {
			o[j] += p.w * v
		}
	}
}

// GeGLU implements compute.ActivationContext.
func (c *context) GeGLU(gate, up compute.Tensor) compute.Tensor {
	return c.elementwise("GeGLU", gate, up, func(o, g, u []float32) {
		u = u[:len(g)]
		for i, x := range g {
			o[i] = geluTanh(x) * u[i]
		}
	})
}

// geluTanh is gelu_pytorch_tanh: 0.5x(1 + tanh(sqrt(2/π)(x + 0.044715x³))).
func geluTanh(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
}

// RMSNormOffset implements compute.ActivationContext.
func (c *context) RMSNormOffset(x compute.Tensor, w compute.Vector, offset, eps float32) compute.Tensor {
	v, ok := w.(vector)
	if !ok {
		return c.fail("RMSNormOffset: weight is not a CPU vector")
	}
	shifted := make(vector, len(v))
	for i, x := range v {
		shifted[i] = offset + x
	}
	return c.RMSNorm(x, shifted, eps)
}

// Clamp implements compute.ClampContext.
func (c *context) Clamp(x compute.Tensor, lo, hi float32) compute.Tensor {
	return c.unary("Clamp", x, func(v float32) float32 { return min(max(v, lo), hi) })
}

// Scale implements compute.ActivationContext.
func (c *context) Scale(x compute.Tensor, s float32) compute.Tensor {
	return c.unary("Scale", x, func(v float32) float32 { return v * s })
}

// SoftCap implements compute.ActivationContext.
func (c *context) SoftCap(x compute.Tensor, cp float32) compute.Tensor {
	if cp <= 0 {
		return c.fail("SoftCap: the cap must be positive, got %v", cp)
	}
	return c.unary("SoftCap", x, func(v float32) float32 { return cp * float32(math.Tanh(float64(v/cp))) })
}

// SigmoidMul implements compute.ActivationContext.
func (c *context) SigmoidMul(x, g compute.Tensor) compute.Tensor {
	a, ok := c.args(x, g)
	if !ok {
		return nilTensor
	}
	xs, gs := a[0], a[1]
	if gs.rows != xs.rows || gs.cols <= 0 || xs.cols%gs.cols != 0 {
		return c.fail("SigmoidMul of %d×%d by a gate of %d×%d", xs.rows, xs.cols, gs.rows, gs.cols)
	}
	out := c.newTensor(xs.rows, xs.cols)
	group := xs.cols / gs.cols
	for i, v := range xs.data {
		r, col := i/xs.cols, i%xs.cols
		out.data[i] = v * sigmoid(gs.data[r*gs.cols+col/group])
	}
	return out
}

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

func (c *context) unary(op string, x compute.Tensor, fn func(float32) float32) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	out := c.newTensor(a[0].rows, a[0].cols)
	for i, v := range a[0].data {
		out.data[i] = fn(v)
	}
	return out
}

// Fail implements compute.Failer.
func (c *context) Fail(err error) compute.Tensor {
	if c.err == nil {
		c.err = err
	}
	return nilTensor
}
