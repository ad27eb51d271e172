package metal

import (
	"fmt"
	"math"
	"runtime"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
)

// tensor is an activation: its dims are known when the op is recorded, its MLX array
// once the context has built it.
type tensor struct {
	rows, cols int
	arr        mlxArray
	build      func(g *graph) mlxArray
}

func (t *tensor) Dims() (int, int) { return t.rows, t.cols }

var nilTensor = &tensor{}

// pendingAppend is a step's keys and values for a kvstore.Layer, appended to it once
// the step's graph has been evaluated.
type pendingAppend struct {
	cache kvstore.Layer
	k, v  mlxArray // float32, T × kvHeads·dim
	n     int
}

type context struct {
	b       *Backend
	err     error
	g       *graph // owns every array the context built, until Close
	nodes   []*tensor
	built   int
	appends []pendingAppend
	states  []stateWrite    // recurrent states to copy back after the step's evaluation
	pending map[uintptr]int // positions recorded for a layer but not yet appended to it
	// tower says the pass has recorded a vision tower's BlockAttention: it is then built
	// op by op, and each Free is a barrier (vision.go).
	tower bool
}

// NewContext implements compute.Backend.
func (b *Backend) NewContext() compute.Context {
	return &context{b: b, g: &graph{l: b.lib, s: b.gpu}, pending: map[uintptr]int{}}
}

func (c *context) Err() error { return c.err }

func (c *context) Close() {
	if c.g == nil {
		return
	}
	g := c.g
	c.g, c.nodes = nil, nil
	c.b.do(func() error { g.free(); return nil })
}

func (c *context) fail(format string, args ...any) compute.Tensor {
	if c.err == nil {
		c.err = fmt.Errorf("compute: "+format, args...)
	}
	return nilTensor
}

// args converts its arguments to this backend's tensors, or reports false after an error.
func (c *context) args(ts ...compute.Tensor) ([]*tensor, bool) {
	if c.err != nil {
		return nil, false
	}
	if c.g == nil {
		c.fail("the context is closed")
		return nil, false
	}
	out := make([]*tensor, len(ts))
	for i, t := range ts {
		mt, ok := t.(*tensor)
		if !ok || mt == nilTensor {
			c.fail("tensor argument %d is not a Metal tensor of this context", i)
			return nil, false
		}
		out[i] = mt
	}
	return out, true
}

// record adds an op whose result is rows × cols.
func (c *context) record(rows, cols int, build func(g *graph) mlxArray) compute.Tensor {
	t := &tensor{rows: rows, cols: cols, build: build}
	c.nodes = append(c.nodes, t)
	return t
}

// buildPending builds the MLX graph of every op recorded since the last build. In a
// tower's pass (one that recorded a BlockAttention, with no KV appends or recurrent
// states) each op is evaluated once built, the temporaries it made let go of first: MLX
// frees them, or computes over them in place, as the op runs, and the graph keeps only
// its result to the next barrier (Free). A composite op such as the tanh GELU (nine of
// MLX's operations over the whole tensor) then holds about one tensor beside its input,
// as the CPU backend's one kernel does, and no op runs beside another's temporaries.
func (c *context) buildPending(g *graph) {
	for ; c.built < len(c.nodes) && g.err == nil; c.built++ {
		t := c.nodes[c.built]
		n := len(g.owned)
		t.arr = t.build(g)
		if c.tower && len(c.appends) == 0 && len(c.states) == 0 {
			g.release(n, t.arr)
			if t.arr != 0 {
				g.eval(t.arr)
			}
		}
	}
}

func (c *context) Embed(w compute.Weight, ids []int32) compute.Tensor {
	if c.err != nil {
		return nilTensor
	}
	mw, ok := w.(*weight)
	if !ok {
		return c.fail("Embed: weight is not a Metal weight")
	}
	if mw.stream != nil {
		return c.fail("Embed: %q is a streamed expert stack, which only MoE reads", mw.name)
	}
	if len(ids) == 0 {
		return c.fail("Embed of no tokens")
	}
	for _, id := range ids {
		if id < 0 || int(id) >= mw.out {
			return c.fail("token id %d is outside the vocabulary of %d entries of %q", id, mw.out, mw.name)
		}
	}
	ids = append([]int32(nil), ids...)
	return c.record(len(ids), mw.in, func(g *graph) mlxArray {
		idx := g.fromInt32s(ids, len(ids))
		if !mw.q.Quantized() {
			return g.astype(g.takeAxis(mw.w, idx, 0), dtFloat32)
		}
		codes, scales := g.takeAxis(mw.w, idx, 0), g.takeAxis(mw.scales, idx, 0)
		var biases mlxArray
		if mw.biases != 0 {
			biases = g.takeAxis(mw.biases, idx, 0)
		}
		return g.dequantize(codes, scales, biases, mw.q.GroupSize, mw.q.Bits, string(mw.q.Mode), dtFloat32)
	})
}

func (c *context) Linear(x compute.Tensor, w compute.Weight) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	mw, ok := w.(*weight)
	if !ok {
		return c.fail("Linear: weight is not a Metal weight")
	}
	if mw.stream != nil {
		return c.fail("Linear: %q is a streamed expert stack, which only MoE reads", mw.name)
	}
	if a[0].cols != mw.in {
		return c.fail("Linear: input of %d columns for %q, which takes %d", a[0].cols, mw.name, mw.in)
	}
	return c.record(a[0].rows, mw.out, func(g *graph) mlxArray {
		xc := g.astype(a[0].arr, mw.dt)
		var y mlxArray
		switch {
		case mw.q.Quantized() && c.b.wide && a[0].rows >= wideDequantRows:
			// MLX's CPU quantized matmul is a scalar loop; for a prefill, decoding the
			// matrix (transiently) and multiplying through BLAS is many times faster.
			w := g.dequantize(mw.w, mw.scales, mw.biases, mw.q.GroupSize, mw.q.Bits, string(mw.q.Mode), dtFloat32)
			y = g.matmul(xc, g.transpose(w, 1, 0))
		case mw.q.Quantized():
			y = g.qmm(xc, mw.w, mw.scales, mw.biases, true, mw.q.GroupSize, mw.q.Bits, string(mw.q.Mode))
		default:
			y = g.matmul(xc, g.transpose(mw.w, 1, 0))
		}
		y = g.astype(y, dtFloat32)
		if mw.bias != 0 {
			y = g.add(y, mw.bias)
		}
		return y
	})
}

func (c *context) RMSNorm(x compute.Tensor, w compute.Vector, eps float32) compute.Tensor {
	return c.rmsNorm("RMSNorm", x, w, eps, func(g *graph, w mlxArray) mlxArray { return w })
}

// rmsNorm is RMSNorm with the weight scale(w) (RMSNormOffset shifts it).
func (c *context) rmsNorm(op string, x compute.Tensor, w compute.Vector, eps float32, scale func(g *graph, w mlxArray) mlxArray) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	mv, ok := w.(*vector)
	if !ok {
		return c.fail("%s: weight is not a Metal vector", op)
	}
	if mv.n != a[0].cols {
		return c.fail("%s: %d columns with a weight of %d", op, a[0].cols, mv.n)
	}
	return c.record(a[0].rows, a[0].cols, func(g *graph) mlxArray { return g.rmsNorm(a[0].arr, scale(g, mv.a), eps) })
}

func (c *context) Reshape(x compute.Tensor, rows, cols int) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	if rows <= 0 || cols <= 0 || rows*cols != a[0].rows*a[0].cols {
		return c.fail("Reshape of %d×%d to %d×%d", a[0].rows, a[0].cols, rows, cols)
	}
	return c.record(rows, cols, func(g *graph) mlxArray { return g.reshape(a[0].arr, rows, cols) })
}

// heads views x (T × H·d) as 1 × H × T × d, the layout MLX's rope and attention take.
func heads(g *graph, x mlxArray, T, h, d int) mlxArray {
	return g.transpose(g.reshape(x, 1, T, h, d), 0, 2, 1, 3)
}

// rows is the inverse of heads.
func rows(g *graph, x mlxArray, T, h, d int) mlxArray {
	return g.reshape(g.transpose(x, 0, 2, 1, 3), T, h*d)
}

func (c *context) RoPE(x compute.Tensor, r *compute.RoPE, headDim, offset int) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	t := a[0]
	if r == nil || headDim <= 0 || t.cols%headDim != 0 || r.Dims > headDim || r.Dims%2 != 0 || len(r.InvFreq) != r.Dims/2 || offset < 0 {
		return c.fail("RoPE over %d columns with head size %d, offset %d", t.cols, headDim, offset)
	}
	h := t.cols / headDim
	if !r.Plain() {
		return c.record(t.rows, t.cols, func(g *graph) mlxArray {
			return rows(g, ropeTable(g, heads(g, t.arr, t.rows, h, headDim), r, h, t.rows, headDim, offset), t.rows, h, headDim)
		})
	}
	return c.record(t.rows, t.cols, func(g *graph) mlxArray {
		x4 := heads(g, t.arr, t.rows, h, headDim)
		if r.Scale != 1 {
			// cos and sin times Scale on the rotated columns equals scaling them first.
			s := make([]float32, headDim)
			for j := range s {
				s[j] = 1
				if j < r.Dims {
					s[j] = r.Scale
				}
			}
			x4 = g.mul(x4, g.fromFloat32s(s, headDim))
		}
		y := g.rope(x4, r.Dims, offset, c.b.ropeFreqs(g, r), r.Interleaved)
		return rows(g, y, t.rows, h, headDim)
	})
}

// ropeTable rotates x4 (1 × H × T × headDim) with cos and sin computed on the host for
// each of its positions (r.CosSin, as the CPU backend does): the path of a RoPE whose
// frequencies or scale change with the position (longrope's switch, a query scale per
// position), which MLX's fused rope, one frequency table for every position, cannot take.
// It computes in float32.
func ropeTable(g *graph, x4 mlxArray, r *compute.RoPE, h, T, headDim, offset int) mlxArray {
	half := r.Dims / 2
	cos, sin := make([]float32, T*half), make([]float32, T*half)
	for p := 0; p < T; p++ {
		for i := 0; i < half; i++ {
			cos[p*half+i], sin[p*half+i] = r.CosSin(offset+p, i)
		}
	}
	x := g.astype(x4, dtFloat32)
	var parts []mlxArray
	if r.Interleaved {
		// Pairs (2i, 2i+1): the rotated columns as [1, H, T, half, 2].
		cs, sn := g.fromFloat32s(cos, 1, 1, T, half, 1), g.fromFloat32s(sin, 1, 1, T, half, 1)
		xr := g.reshape(g.slice(x, []int{0, 0, 0, 0}, []int{1, h, T, r.Dims}), 1, h, T, half, 2)
		x1 := g.slice(xr, []int{0, 0, 0, 0, 0}, []int{1, h, T, half, 1})
		x2 := g.slice(xr, []int{0, 0, 0, 0, 1}, []int{1, h, T, half, 2})
		rot := g.concat(4, g.sub(g.mul(x1, cs), g.mul(x2, sn)), g.add(g.mul(x2, cs), g.mul(x1, sn)))
		parts = []mlxArray{g.reshape(rot, 1, h, T, r.Dims)}
	} else {
		cs, sn := g.fromFloat32s(cos, 1, 1, T, half), g.fromFloat32s(sin, 1, 1, T, half)
		x1 := g.slice(x, []int{0, 0, 0, 0}, []int{1, h, T, half})
		x2 := g.slice(x, []int{0, 0, 0, half}, []int{1, h, T, r.Dims})
		parts = []mlxArray{g.sub(g.mul(x1, cs), g.mul(x2, sn)), g.add(g.mul(x2, cs), g.mul(x1, sn))}
	}
	if r.Dims < headDim {
		parts = append(parts, g.slice(x, []int{0, 0, 0, r.Dims}, []int{1, h, T, headDim}))
	}
	return g.concat(3, parts...)
}

func (c *context) Attention(q, k, v compute.Tensor, cache kvstore.Layer, nHeads int, scale float32) compute.Tensor {
	return c.attention("Attention", q, k, v, cache, nHeads, scale, nil, nil, nil)
}

// AttentionSinks implements compute.SinkAttentionContext (gpt-oss): Attention whose
// softmaxes each have their head's sink logit in the denominator.
func (c *context) AttentionSinks(q, k, v compute.Tensor, cache kvstore.Layer, nHeads int, scale float32, sinks compute.Vector) compute.Tensor {
	sv, ok := sinks.(*vector)
	if !ok || sv.n != nHeads {
		return c.fail("AttentionSinks: want %d sink logits as a Metal vector, got %T of %d", nHeads, sinks, sinks.Len())
	}
	return c.attention("AttentionSinks", q, k, v, cache, nHeads, scale, sv, nil, nil)
}

// attention appends k and v to cache and attends over it with q: the plain attention,
// with sinks (one logit per query head), latent queries qv (T × heads·vDim, multi-head
// latent attention) or bidirectional spans (Gemma 3's images: kvstore.Attention's
// Bidirectional) when they are not nil.
func (c *context) attention(op string, q, k, v compute.Tensor, cache kvstore.Layer, nHeads int, scale float32, sinks *vector, qv compute.Tensor, spans []kvstore.Span) compute.Tensor {
	ts := []compute.Tensor{q, k, v}
	if qv != nil {
		ts = append(ts, qv)
	}
	a, ok := c.args(ts...)
	if !ok {
		return nilTensor
	}
	if cache == nil {
		return c.fail("%s without a KV cache layer", op)
	}
	kvHeads, kDim, vDim := cache.Dims()
	T := a[0].rows
	if T == 0 || kvHeads <= 0 || a[1].rows != T || a[2].rows != T || nHeads <= 0 || nHeads%kvHeads != 0 ||
		a[0].cols != nHeads*kDim || a[1].cols != kvHeads*kDim || a[2].cols != kvHeads*vDim {
		return c.fail("%s: q %d×%d, k %d×%d, v %d×%d do not fit %d heads over a cache of %d KV heads of %d/%d dims",
			op, a[0].rows, a[0].cols, a[1].rows, a[1].cols, a[2].rows, a[2].cols, nHeads, kvHeads, kDim, vDim)
	}
	var qvt *tensor
	if qv != nil {
		qvt = a[3]
		if qvt.rows != T || qvt.cols != nHeads*vDim {
			return c.fail("%s: latent queries of %d×%d for %d rows of %d heads of %d", op, qvt.rows, qvt.cols, T, nHeads, vDim)
		}
	}
	key := layerKey(cache)
	return c.record(T, nHeads*vDim, func(g *graph) mlxArray {
		var qva mlxArray
		if qvt != nil {
			qva = g.float32Array(qvt.arr)
		}
		src, inPlace := cache.(kvstore.BlockSource)
		if t, ok := cache.(interface{ Target() kvstore.Spec }); ok && inPlace {
			inPlace = readable(t.Target().K) && readable(t.Target().V)
		}
		if !inPlace {
			return c.attendOnCPU(g, a[0], a[1], a[2], cache, nHeads, scale, sinks, qva, spans)
		}
		s := c.stored(g, cache, kvHeads, kDim, vDim, nHeads, T)
		s.spans = spans
		if sinks != nil {
			s.sinks = sinks.a
		}
		s.qv = qva
		spec := src.Spec()
		k2, v2 := g.float32Array(a[1].arr), g.float32Array(a[2].arr)
		if c.pending[key] > 0 || src.Converts() || !roundable(spec.K) || !roundable(spec.V) {
			// Store this step's keys and values first, then read the blocks alone.
			c.flushAppends(g, k2, v2)
			kd, vd := g.read(k2), g.read(v2)
			if g.err != nil {
				return 0
			}
			if err := cache.Append(kd, vd, T); err != nil {
				return g.fail(fmt.Errorf("%s: %w", op, err))
			}
			return s.attend(a[0].arr, scale, src.Blocks(), 0, 0, src.Spec())
		}
		out := s.attend(a[0].arr, scale, src.Blocks(), heads(g, a[1].arr, T, kvHeads, kDim), heads(g, a[2].arr, T, kvHeads, vDim), spec)
		c.appends = append(c.appends, pendingAppend{cache, k2, v2, T})
		c.pending[key] += T
		return out
	})
}

// stored sets up the attention of T query rows of nHeads heads over cache's blocks:
// in fp16, or float32 over a float32 cache and on MLX's CPU; a sliding window's mask
// where the cache keeps one (kvstore.Rotating's ring, or a float32 Full that keeps
// every position and attends over the window).
func (c *context) stored(g *graph, cache kvstore.Layer, kvHeads, kDim, vDim, nHeads, T int) *storedAttention {
	s := &storedAttention{g: g, kvHeads: kvHeads, kDim: kDim, vDim: vDim, heads: nHeads, T: T, dt: dtFloat16}
	if f, ok := cache.(*kvstore.Full); ok && f.FP32() {
		s.fp32 = true
	}
	if s.fp32 || c.b.wide {
		s.dt = dtFloat32
	}
	if w, ok := cache.(interface{ Window() int }); ok {
		s.window = max(w.Window(), 0)
	}
	return s
}

// AttentionShared implements compute.SharedKVContext (Gemma 4's KV-shared layers): the
// keys and values this pass recorded so far are stored first (the source layer's among
// them, one evaluation), then q attends over the cache's blocks where they lie, or in Go
// for a storage MLX does not read (affine groups of 16); spans widen their rows' masks
// as in AttentionSpans.
func (c *context) AttentionShared(q compute.Tensor, cache kvstore.Layer, nHeads int, scale float32, spans []kvstore.Span) compute.Tensor {
	a, ok := c.args(q)
	if !ok {
		return nilTensor
	}
	if cache == nil {
		return c.fail("AttentionShared without a KV cache layer")
	}
	spans, err := checkSpans(spans)
	if err != nil {
		return c.fail("AttentionShared: %v", err)
	}
	kvHeads, kDim, vDim := cache.Dims()
	T := a[0].rows
	if T == 0 || kvHeads <= 0 || nHeads <= 0 || nHeads%kvHeads != 0 || a[0].cols != nHeads*kDim {
		return c.fail("AttentionShared: q %d×%d does not fit %d heads over a cache of %d KV heads of %d dims", a[0].rows, a[0].cols, nHeads, kvHeads, kDim)
	}
	return c.record(T, nHeads*vDim, func(g *graph) mlxArray {
		qa := g.float32Array(a[0].arr)
		c.flushAppends(g, qa)
		if g.err != nil {
			return 0
		}
		if cache.Len() < T {
			return g.fail(fmt.Errorf("AttentionShared: %d queries over a cache of %d positions", T, cache.Len()))
		}
		src, inPlace := cache.(kvstore.BlockSource)
		if t, ok := cache.(interface{ Target() kvstore.Spec }); ok && inPlace {
			inPlace = readable(t.Target().K) && readable(t.Target().V)
		}
		if !inPlace {
			return c.attendGo(g, qa, T, cache, nHeads, scale, nil, 0, spans)
		}
		s := c.stored(g, cache, kvHeads, kDim, vDim, nHeads, T)
		s.spans = spans
		return s.attend(a[0].arr, scale, src.Blocks(), 0, 0, src.Spec())
	})
}

// attendOnCPU is the path for a layer whose storage MLX does not read (not a
// kvstore.BlockSource, or affine groups of 16): the step's graph so far is evaluated, the layer appends and attends in Go,
// and the result goes back to the device. It costs one extra evaluation per such layer.
// sinks, qv (float32, evaluated with the queries) and spans are attendGo's.
func (c *context) attendOnCPU(g *graph, q, k, v *tensor, cache kvstore.Layer, nHeads int, scale float32, sinks *vector, qv mlxArray, spans []kvstore.Span) mlxArray {
	qa, ka, va := g.float32Array(q.arr), g.float32Array(k.arr), g.float32Array(v.arr)
	extra := []mlxArray{qa, ka, va}
	if qv != 0 {
		extra = append(extra, qv)
	}
	c.flushAppends(g, extra...)
	kd, vd := g.read(ka), g.read(va)
	if g.err != nil {
		return 0
	}
	if err := cache.Append(kd, vd, q.rows); err != nil {
		return g.fail(fmt.Errorf("Attention: %w", err))
	}
	return c.attendGo(g, qa, q.rows, cache, nHeads, scale, sinks, qv, spans)
}

// attendGo is the layer's own attention for the last T positions it holds, with the
// queries of qa (float32, T × heads·kDim), the sink logits of sinks, the latent queries of
// qv (float32, T × heads·vDim) and bidirectional spans when they are set.
func (c *context) attendGo(g *graph, qa mlxArray, T int, cache kvstore.Layer, nHeads int, scale float32, sinks *vector, qv mlxArray, spans []kvstore.Span) mlxArray {
	_, _, vDim := cache.Dims()
	as := []mlxArray{qa}
	var sa mlxArray
	if sinks != nil {
		sa = g.float32Array(sinks.a)
		as = append(as, sa)
	}
	if qv != 0 {
		as = append(as, qv)
	}
	g.eval(as...)
	att := kvstore.Attention{Q: g.read(qa), N: T, Heads: nHeads, Scale: scale, Threads: runtime.NumCPU(), Bidirectional: spans}
	if sa != 0 {
		att.Sinks = g.read(sa)
	}
	if qv != 0 {
		att.QV = g.read(qv)
	}
	if g.err != nil {
		return 0
	}
	att.Out = make([]float32, T*nHeads*vDim)
	if err := cache.Attend(att); err != nil {
		return g.fail(fmt.Errorf("Attention: %w", err))
	}
	return g.fromFloat32s(att.Out, T, nHeads*vDim)
}

// flushAppends evaluates extra together with the recorded appends and recurrent
// states, then appends those to their layers and copies the states back.
func (c *context) flushAppends(g *graph, extra ...mlxArray) {
	as := append([]mlxArray(nil), extra...)
	for _, p := range c.appends {
		as = append(as, p.k, p.v)
	}
	for i := range c.states {
		c.states[i].arr = g.float32Array(c.states[i].arr)
		as = append(as, c.states[i].arr)
	}
	g.eval(as...)
	for _, s := range c.states {
		if g.err != nil {
			break
		}
		v := g.read(s.arr)
		if g.err == nil && len(v) != len(s.dst) {
			g.fail(fmt.Errorf("metal: a recurrent state of %d values came back as %d", len(s.dst), len(v)))
			break
		}
		copy(s.dst, v)
	}
	c.states = c.states[:0]
	for _, p := range c.appends {
		if g.err != nil {
			break
		}
		kd, vd := g.read(p.k), g.read(p.v)
		if g.err == nil {
			if err := p.cache.Append(kd, vd, p.n); err != nil {
				g.fail(fmt.Errorf("Attention: %w", err))
			}
		}
	}
	c.appends = c.appends[:0]
	clear(c.pending)
}

func (c *context) SwiGLU(gate, up compute.Tensor) compute.Tensor {
	return c.elementwise("SwiGLU", gate, up, func(g *graph, a, b mlxArray) mlxArray {
		return g.mul(g.mul(a, g.sigmoid(a)), b)
	})
}

func (c *context) Add(x, y compute.Tensor) compute.Tensor {
	return c.elementwise("Add", x, y, (*graph).add)
}

func (c *context) Mul(x, y compute.Tensor) compute.Tensor {
	return c.elementwise("Mul", x, y, (*graph).mul)
}

func (c *context) elementwise(op string, x, y compute.Tensor, fn func(g *graph, a, b mlxArray) mlxArray) compute.Tensor {
	a, ok := c.args(x, y)
	if !ok {
		return nilTensor
	}
	if a[0].rows != a[1].rows || a[0].cols != a[1].cols {
		return c.fail("%s of %d×%d and %d×%d", op, a[0].rows, a[0].cols, a[1].rows, a[1].cols)
	}
	return c.record(a[0].rows, a[0].cols, func(g *graph) mlxArray { return fn(g, a[0].arr, a[1].arr) })
}

func (c *context) Rows(x compute.Tensor, start, n int) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	t := a[0]
	if start < 0 || n <= 0 || start+n > t.rows {
		return c.fail("Rows %d..%d of a tensor of %d rows", start, start+n, t.rows)
	}
	return c.record(n, t.cols, func(g *graph) mlxArray {
		return g.slice(t.arr, []int{start, 0}, []int{start + n, t.cols})
	})
}

// Float32s builds the ops recorded since the last call, evaluates x together with the
// step's keys and values in one mlx_eval, appends those to their layers and returns x.
func (c *context) Float32s(x compute.Tensor) ([]float32, error) {
	a, ok := c.args(x)
	if !ok {
		return nil, c.err
	}
	var out []float32
	err := c.b.do(func() error {
		g := c.g
		c.buildPending(g)
		xa := g.float32Array(a[0].arr)
		c.flushAppends(g, xa)
		out = g.read(xa)
		return g.err
	})
	if err != nil {
		c.err = err
		return nil, err
	}
	if len(out) != a[0].rows*a[0].cols {
		c.err = fmt.Errorf("metal: evaluated %d values for a %d×%d tensor", len(out), a[0].rows, a[0].cols)
		return nil, c.err
	}
	return out, nil
}

var negInf = float32(math.Inf(-1))

// wideDequantRows is the number of rows from which a quantized product on MLX's CPU
// decodes the weight and multiplies in float32 instead of calling quantized_matmul.
const wideDequantRows = 16
