package backend

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
)

// The checks of the optional operations of the mixture-of-experts, Gemma and Gated
// DeltaNet architectures (compute.MoEContext, ActivationContext,
// LinearAttentionContext), each against a plain reference written out here.

// feeder hands an op rows of random inputs: rows first..first+n-1 of a float32 feed.
type feeder struct {
	prep   func(b compute.Backend) error
	rowsOf func(b compute.Backend, c compute.Context, first, n int) compute.Tensor
	x, y   []float32 // the feed's first and second T rows
	T, in  int
}

// extOp runs op on b through the context's optional interface E; a backend without it
// fails the check.
func extOp[E any](f feeder, b compute.Backend, op func(c compute.Context, e E) compute.Tensor) ([]float32, error) {
	if err := compute.Supports[E](b, "this operation"); err != nil {
		return nil, err
	}
	if err := f.prep(b); err != nil {
		return nil, err
	}
	return run(b, func(c compute.Context) compute.Tensor {
		e, _ := compute.Ext[E](c)
		return op(c, e)
	})
}

func geluTanh(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

func sigmoid64(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func extCases(r *rand.Rand, src source, f feeder) ([]opCase, error) {
	T, in := f.T, f.in
	var cases []opCase
	act := func(name string, want []float32, op func(c compute.Context, e compute.ActivationContext, x, y compute.Tensor) compute.Tensor) {
		cases = append(cases, opCase{name, []string{"ActivationContext." + name}, tolArith, func(b compute.Backend) ([]float32, error) {
			return extOp(f, b, func(c compute.Context, e compute.ActivationContext) compute.Tensor {
				return op(c, e, f.rowsOf(b, c, 0, T), f.rowsOf(b, c, T, T))
			})
		}, want, nil})
	}

	// Elementwise activations.
	geglu, scaled, capped := make([]float32, T*in), make([]float32, T*in), make([]float32, T*in)
	const capv, s = 0.7, 1.75
	for i := range geglu {
		a, b := float64(f.x[i]), float64(f.y[i])
		geglu[i] = float32(geluTanh(a) * b)
		scaled[i] = float32(a * s)
		capped[i] = float32(capv * math.Tanh(a/capv))
	}
	act("GeGLU", geglu, func(_ compute.Context, e compute.ActivationContext, x, y compute.Tensor) compute.Tensor {
		return e.GeGLU(x, y)
	})
	act("Scale", scaled, func(_ compute.Context, e compute.ActivationContext, x, _ compute.Tensor) compute.Tensor {
		return e.Scale(x, s)
	})
	act("SoftCap", capped, func(_ compute.Context, e compute.ActivationContext, x, _ compute.Tensor) compute.Tensor {
		return e.SoftCap(x, capv)
	})

	// Clamp (Gemma 4's clipped linears), with bounds the feed's values pass on both sides.
	const lo, hi = -0.4, 0.6
	clamped := make([]float32, T*in)
	for i := range clamped {
		clamped[i] = float32(min(max(float64(f.x[i]), lo), hi))
	}
	cases = append(cases, opCase{"Clamp", []string{"ClampContext.Clamp"}, tolArith, func(b compute.Backend) ([]float32, error) {
		return extOp(f, b, func(c compute.Context, e compute.ClampContext) compute.Tensor {
			return e.Clamp(f.rowsOf(b, c, 0, T), lo, hi)
		})
	}, clamped, nil})

	// SigmoidMul with a gate per group of 32 columns (c.Cols of the second rows).
	const group = 32
	gcols := in / group
	gated := make([]float32, T*in)
	for t := 0; t < T; t++ {
		for j := 0; j < in; j++ {
			gated[t*in+j] = float32(float64(f.x[t*in+j]) * sigmoid64(float64(f.y[t*in+j/group])))
		}
	}
	cases = append(cases, opCase{"SigmoidMul per group", []string{"ActivationContext.SigmoidMul", "LinearAttentionContext.Cols"}, tolArith, func(b compute.Backend) ([]float32, error) {
		return extOp(f, b, func(c compute.Context, e compute.ActivationContext) compute.Tensor {
			l, ok := compute.Ext[compute.LinearAttentionContext](c)
			if !ok {
				return compute.Unsupported(c, "Cols")
			}
			return e.SigmoidMul(f.rowsOf(b, c, 0, T), l.Cols(f.rowsOf(b, c, T, T), 0, gcols))
		})
	}, gated, nil})

	// RMSNormOffset: weights stored around 0, scaled by 1 + w.
	nw := stored(randn(r, in, 0.2), safetensors.BF16)
	src.floats("normoff", safetensors.BF16, []int{in}, nw)
	const eps = 1e-6
	normOff := make([]float32, T*in)
	for t := 0; t < T; t++ {
		var ss float64
		for _, v := range f.x[t*in : (t+1)*in] {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(in)+eps)
		for j, v := range f.x[t*in : (t+1)*in] {
			normOff[t*in+j] = float32(float64(v) * inv * (1 + float64(nw[j])))
		}
	}
	cases = append(cases, opCase{"RMSNormOffset", []string{"ActivationContext.RMSNormOffset"}, tolArith, func(b compute.Backend) ([]float32, error) {
		v, err := b.Vector(src, "normoff")
		if err != nil {
			return nil, err
		}
		return extOp(f, b, func(c compute.Context, e compute.ActivationContext) compute.Tensor {
			return e.RMSNormOffset(f.rowsOf(b, c, 0, T), v, 1, eps)
		})
	}, normOff, nil})

	// Linear-attention helpers: L2NormScale over heads of 32, Cols + ConcatCols.
	const hd = 32
	l2 := make([]float32, T*in)
	for row := 0; row < T*in/hd; row++ {
		var ss float64
		for _, v := range f.x[row*hd : (row+1)*hd] {
			ss += float64(v) * float64(v)
		}
		inv := 0.5 / math.Sqrt(ss+1e-6)
		for j, v := range f.x[row*hd : (row+1)*hd] {
			l2[row*hd+j] = float32(float64(v) * inv)
		}
	}
	lin := func(name string, ops []string, tol Tol, want []float32, op func(c compute.Context, l compute.LinearAttentionContext, x, y compute.Tensor) compute.Tensor) {
		cases = append(cases, opCase{name, ops, tol, func(b compute.Backend) ([]float32, error) {
			return extOp(f, b, func(c compute.Context, l compute.LinearAttentionContext) compute.Tensor {
				return op(c, l, f.rowsOf(b, c, 0, T), f.rowsOf(b, c, T, T))
			})
		}, want, nil})
	}
	lin("L2NormScale", []string{"LinearAttentionContext.L2NormScale"}, tolArith, l2, func(c compute.Context, l compute.LinearAttentionContext, x, _ compute.Tensor) compute.Tensor {
		return c.Reshape(l.L2NormScale(c.Reshape(x, T*in/hd, hd), 1e-6, 0.5), T, in)
	})
	var joined []float32
	for t := 0; t < T; t++ {
		joined = append(joined, f.y[t*in+5:t*in+45]...)
		joined = append(joined, f.x[t*in:t*in+16]...)
	}
	lin("Cols+ConcatCols", []string{"LinearAttentionContext.Cols", "LinearAttentionContext.ConcatCols"}, tolCopy, joined, func(_ compute.Context, l compute.LinearAttentionContext, x, y compute.Tensor) compute.Tensor {
		return l.ConcatCols(l.Cols(y, 5, 40), l.Cols(x, 0, 16))
	})

	// DeltaGates over H = 8 heads (the first 8 columns of each feed).
	const H = 8
	aLog, dtBias := stored(randn(r, H, 0.5), safetensors.F32), stored(randn(r, H, 1), safetensors.F32)
	src.floats("alog", safetensors.F32, []int{H}, aLog)
	src.floats("dtbias", safetensors.F32, []int{H}, dtBias)
	var gates []float32
	for _, which := range []int{0, 1} {
		for t := 0; t < T; t++ {
			for h := 0; h < H; h++ {
				if which == 0 {
					z := float64(f.x[t*in+h] + dtBias[h])
					gates = append(gates, float32(-math.Exp(float64(aLog[h]))*math.Log1p(math.Exp(z))))
				} else {
					gates = append(gates, float32(sigmoid64(float64(f.y[t*in+h]))))
				}
			}
		}
	}
	cases = append(cases, opCase{"DeltaGates", []string{"LinearAttentionContext.DeltaGates"}, tolArith, func(b compute.Backend) ([]float32, error) {
		al, err := b.Vector(src, "alog")
		if err != nil {
			return nil, err
		}
		db, err := b.Vector(src, "dtbias")
		if err != nil {
			return nil, err
		}
		return extOp(f, b, func(c compute.Context, l compute.LinearAttentionContext) compute.Tensor {
			g, beta := l.DeltaGates(l.Cols(f.rowsOf(b, c, 0, T), 0, H), l.Cols(f.rowsOf(b, c, T, T), 0, H), al, db)
			return c.Reshape(l.ConcatCols(c.Reshape(g, 1, T*H), c.Reshape(beta, 1, T*H)), 2*T, H)
		})
	}, gates, nil})

	cs, err := convCase(r, src, f)
	if err != nil {
		return nil, err
	}
	cases = append(cases, cs, deltaCase(r, src))
	for _, kind := range []string{"", "geglu", "sigmoid"} {
		for _, q := range []compute.Quant{{}, {Mode: quant.Affine, Bits: 4, GroupSize: 32}} {
			c, err := moeCase(r, src, f, q, kind)
			if err != nil {
				return nil, err
			}
			cases = append(cases, c)
		}
	}
	lc, err := latentCases(r, src)
	if err != nil {
		return nil, err
	}
	cases = append(cases, lc...)
	for _, q := range []compute.Quant{{}, {Mode: quant.MXFP4, Bits: 4, GroupSize: 32}} {
		c, err := clampedMoECase(r, src, f, q)
		if err != nil {
			return nil, err
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// clampedMoECase checks gpt-oss's experts (ClampedMoE): 4 experts with [experts, out]
// biases beside each stacked matrix, top-2 softmaxed among themselves, the clamped
// SwiGLU (alpha 1.702, limit 7), float or mxfp4 weights.
func clampedMoECase(r *rand.Rand, src source, f feeder, q compute.Quant) (opCase, error) {
	const E, inter, topK = 4, 32, 2
	T, in := f.T, f.in
	name, tol := "ClampedMoE float", tolF16
	if q.Quantized() {
		name = "ClampedMoE mxfp4"
	}
	prefix := "cmoe." + name
	mats, biases := map[string][]float32{}, map[string][]float32{}
	for _, m := range []struct {
		name     string
		out, cin int
	}{{"gate", inter, in}, {"up", inter, in}, {"down", in, inter}} {
		p := prefix + "." + m.name
		w, err := src.matrix(r, p, E*m.out, m.cin, safetensors.F16, q)
		if err != nil {
			return opCase{}, err
		}
		for _, suffix := range []string{".weight", ".scales", ".biases"} {
			if t, ok := src[p+suffix]; ok {
				t.Shape = []int{E, m.out, t.Shape[1]}
			}
		}
		b := randn(r, E*m.out, 1)
		src.floats(p+".bias", safetensors.F32, []int{E, m.out}, b)
		mats[m.name], biases[m.name] = w, b
	}
	logits := randn(r, T*E, 1)
	embedded(src, prefix+".router", logits, T, E)
	routing := compute.Routing{TopK: topK, SoftmaxTopK: true}
	act := compute.ClampedSwiGLU{Alpha: 1.702, Limit: 7}
	want := make([]float32, T*in)
	for t := 0; t < T; t++ {
		experts, weights := routing.Select(logits[t*E : (t+1)*E])
		x := f.x[t*in : (t+1)*in]
		for i, e := range experts {
			h := make([]float64, inter)
			for j := range h {
				gs, us := float64(biases["gate"][e*inter+j]), float64(biases["up"][e*inter+j])
				for c := 0; c < in; c++ {
					gs += float64(mats["gate"][(e*inter+j)*in+c]) * float64(x[c])
					us += float64(mats["up"][(e*inter+j)*in+c]) * float64(x[c])
				}
				gs = math.Min(gs, float64(act.Limit))
				us = math.Min(math.Max(us, -float64(act.Limit)), float64(act.Limit))
				h[j] = gs * sigmoid64(float64(act.Alpha)*gs) * (us + 1)
			}
			for o := 0; o < in; o++ {
				y := float64(biases["down"][e*in+o])
				for j := range h {
					y += float64(mats["down"][(e*in+o)*inter+j]) * h[j]
				}
				want[t*in+o] += float32(float64(weights[i]) * y)
			}
		}
	}
	return opCase{name, []string{"ClampedMoEContext.ClampedMoE"}, tol, func(b compute.Backend) ([]float32, error) {
		var ws [3]compute.Weight
		for i, m := range []string{"gate", "up", "down"} {
			w, err := b.Weight(src, prefix+"."+m, q)
			if err != nil {
				return nil, err
			}
			ws[i] = w
		}
		router, err := b.Weight(src, prefix+".router", compute.Quant{})
		if err != nil {
			return nil, err
		}
		return extOp(f, b, func(c compute.Context, m compute.ClampedMoEContext) compute.Tensor {
			return m.ClampedMoE(f.rowsOf(b, c, 0, T), rowsIn(c, router, 0, T), ws[0], ws[1], ws[2], E, routing, act)
		})
	}, want, nil}, nil
}

// embedded adds x (rows × cols, float32) as a matrix to feed ops through Embed, which
// returns a float32 weight's rows exactly.
func embedded(src source, name string, x []float32, rows, cols int) {
	src.floats(name+".weight", safetensors.F32, []int{rows, cols}, x)
}

// rowsIn is rows first..first+n-1 of the embedded matrix w.
func rowsIn(c compute.Context, w compute.Weight, first, n int) compute.Tensor {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(first + i)
	}
	return c.Embed(w, ids)
}

// weights binds names (float, unquantized) on b.
func weights(b compute.Backend, src source, names ...string) ([]compute.Weight, error) {
	out := make([]compute.Weight, len(names))
	for i, n := range names {
		w, err := b.Weight(src, n, compute.Quant{})
		if err != nil {
			return nil, err
		}
		out[i] = w
	}
	return out, nil
}

// convCase checks CausalConv1D over C = 64 channels with K = 4 taps in two calls (3
// rows, then 2), so that the state carries over; both outputs and the final state are
// compared.
func convCase(r *rand.Rand, src source, f feeder) (opCase, error) {
	const C, K, rows = 64, 4, 5
	w := stored(randn(r, C*K, 0.5), safetensors.BF16)
	src.floats("conv.weight", safetensors.BF16, []int{C, K, 1}, w) // mlx-lm's layout
	state0 := randn(r, (K-1)*C, 1)
	x := randn(r, rows*C, 1)
	embedded(src, "conv.x", x, rows, C)
	xp := append(slices.Clone(state0), x...) // x' = the state's rows, then x's
	var want []float32
	for t := 0; t < rows; t++ {
		for ch := 0; ch < C; ch++ {
			var s float64
			for j := 0; j < K; j++ {
				s += float64(w[ch*K+j]) * float64(xp[(t+j)*C+ch])
			}
			want = append(want, float32(s*sigmoid64(s)))
		}
	}
	want = append(want, xp[len(xp)-(K-1)*C:]...)
	return opCase{"CausalConv1D (state carried over)", []string{"LinearAttentionContext.CausalConv1D"}, tolArith, func(b compute.Backend) ([]float32, error) {
		ws, err := weights(b, src, "conv", "conv.x")
		if err != nil {
			return nil, err
		}
		state := slices.Clone(state0)
		var out []float32
		for _, call := range [][2]int{{0, 3}, {3, 2}} {
			got, err := extOp(f, b, func(c compute.Context, l compute.LinearAttentionContext) compute.Tensor {
				return l.CausalConv1D(rowsIn(c, ws[1], call[0], call[1]), ws[0], state)
			})
			if err != nil {
				return nil, err
			}
			out = append(out, got...)
		}
		return append(out, state...), nil
	}, want, nil}, nil
}

// deltaCase checks GatedDelta for 4 value heads over 2 key heads (dk = dv = 16): a
// prefill of 3 positions then one more step; both outputs and the final state are
// compared.
func deltaCase(r *rand.Rand, src source) opCase {
	const H, Hk, dk, dv, steps = 4, 2, 16, 16, 4
	state0 := randn(r, H*dk*dv, 0.3)
	q, k, v := randn(r, steps*Hk*dk, 0.3), randn(r, steps*Hk*dk, 0.3), randn(r, steps*H*dv, 1)
	g, beta := make([]float32, steps*H), make([]float32, steps*H)
	for i := range g {
		g[i] = -float32(r.Float64()) * 0.5
		beta[i] = float32(r.Float64())
	}
	for _, in := range []struct {
		name string
		x    []float32
		cols int
	}{{"dq", q, Hk * dk}, {"dk", k, Hk * dk}, {"dv", v, H * dv}, {"dg", g, H}, {"dbeta", beta, H}} {
		embedded(src, in.name, in.x, steps, in.cols)
	}
	S := slices.Clone(state0)
	var want []float32
	for t := 0; t < steps; t++ {
		for h := 0; h < H; h++ {
			kh := h / (H / Hk)
			Sh := S[h*dk*dv : (h+1)*dk*dv]
			qt, kt, vt := q[t*Hk*dk+kh*dk:][:dk], k[t*Hk*dk+kh*dk:][:dk], v[t*H*dv+h*dv:][:dv]
			decay := math.Exp(float64(g[t*H+h]))
			for i := range Sh {
				Sh[i] = float32(float64(Sh[i]) * decay)
			}
			for j := 0; j < dv; j++ {
				var mem float64
				for i := 0; i < dk; i++ {
					mem += float64(Sh[i*dv+j]) * float64(kt[i])
				}
				delta := float64(beta[t*H+h]) * (float64(vt[j]) - mem)
				for i := 0; i < dk; i++ {
					Sh[i*dv+j] += float32(float64(kt[i]) * delta)
				}
			}
			for j := 0; j < dv; j++ {
				var o float64
				for i := 0; i < dk; i++ {
					o += float64(Sh[i*dv+j]) * float64(qt[i])
				}
				want = append(want, float32(o))
			}
		}
	}
	want = append(want, S...)
	return opCase{"GatedDelta (prefill, then a step)", []string{"LinearAttentionContext.GatedDelta"}, tolArith, func(b compute.Backend) ([]float32, error) {
		ws, err := weights(b, src, "dq", "dk", "dv", "dg", "dbeta")
		if err != nil {
			return nil, err
		}
		state := slices.Clone(state0)
		var out []float32
		for _, call := range [][2]int{{0, steps - 1}, {steps - 1, 1}} {
			got, err := extOp(feeder{prep: func(compute.Backend) error { return nil }}, b, func(c compute.Context, l compute.LinearAttentionContext) compute.Tensor {
				in := func(i int) compute.Tensor { return rowsIn(c, ws[i], call[0], call[1]) }
				return l.GatedDelta(in(0), in(1), in(2), in(3), in(4), H, state)
			})
			if err != nil {
				return nil, err
			}
			out = append(out, got...)
		}
		return append(out, state...), nil
	}, want, nil}
}

// moeCase checks MoE: 6 experts (stacked [experts, rows, in] tensors, as mlx-lm's
// switch_mlp stores them) in float or quantized q, top-2 with renormalised weights, for
// the feed's T rows with random router logits.
//
// kind "geglu" checks Gemma 4's GeGLUMoE instead: GELU-gated experts and per-expert
// scales of the routing weights; kind "sigmoid" checks SigmoidMoE: DeepSeek-V3's router
// over the same experts (sigmoid scores, correction biases, 3 groups of which the best 2
// are eligible, renormalised and scaled weights).
func moeCase(r *rand.Rand, src source, f feeder, q compute.Quant, kind string) (opCase, error) {
	const E, inter, topK = 6, 32, 2
	T, in := f.T, f.in
	short, op := "MoE", "MoEContext.MoE"
	routing := compute.Routing{TopK: topK, NormTopK: true}
	switch kind {
	case "geglu":
		short, op = "GeGLUMoE", "GeGLUMoEContext.GeGLUMoE"
		routing.Scales = make([]float32, E)
		for e := range routing.Scales {
			routing.Scales[e] = 0.5 + float32(e)/4
		}
	case "sigmoid":
		short, op = "SigmoidMoE", "SigmoidMoEContext.SigmoidMoE"
		routing = compute.Routing{TopK: topK, NormTopK: true, Sigmoid: true, Bias: randn(r, E, 0.5), Groups: 3, TopKGroups: 2, Scale: 1.8}
	}
	name, tol := short+" float", tolF16 // fp16 weights, fp16 scales when quantized
	if q.Quantized() {
		name = short + " affine 4-bit"
	}
	prefix := "moe." + name
	mats := map[string][]float32{}
	for _, m := range []struct {
		name     string
		out, cin int
	}{{"gate", inter, in}, {"up", inter, in}, {"down", in, inter}} {
		p := prefix + "." + m.name
		w, err := src.matrix(r, p, E*m.out, m.cin, safetensors.F16, q)
		if err != nil {
			return opCase{}, err
		}
		for _, suffix := range []string{".weight", ".scales", ".biases"} {
			if t, ok := src[p+suffix]; ok {
				t.Shape = []int{E, m.out, t.Shape[1]}
			}
		}
		mats[m.name] = w
	}
	logits := randn(r, T*E, 1)
	embedded(src, prefix+".router", logits, T, E)
	want := make([]float32, T*in)
	for t := 0; t < T; t++ {
		experts, weights := routing.Select(logits[t*E : (t+1)*E])
		x := f.x[t*in : (t+1)*in]
		for i, e := range experts {
			h := make([]float64, inter)
			for j := range h {
				var gs, us float64
				for c := 0; c < in; c++ {
					gs += float64(mats["gate"][(e*inter+j)*in+c]) * float64(x[c])
					us += float64(mats["up"][(e*inter+j)*in+c]) * float64(x[c])
				}
				if kind == "geglu" {
					h[j] = geluTanh(gs) * us
				} else {
					h[j] = gs * sigmoid64(gs) * us
				}
			}
			for o := 0; o < in; o++ {
				var y float64
				for j := range h {
					y += float64(mats["down"][(e*in+o)*inter+j]) * h[j]
				}
				want[t*in+o] += float32(float64(weights[i]) * y)
			}
		}
	}
	return opCase{name, []string{op}, tol, func(b compute.Backend) ([]float32, error) {
		var ws [3]compute.Weight
		for i, m := range []string{"gate", "up", "down"} {
			w, err := b.Weight(src, prefix+"."+m, q)
			if err != nil {
				return nil, err
			}
			ws[i] = w
		}
		router, err := b.Weight(src, prefix+".router", compute.Quant{})
		if err != nil {
			return nil, err
		}
		switch kind {
		case "geglu":
			return extOp(f, b, func(c compute.Context, m compute.GeGLUMoEContext) compute.Tensor {
				return m.GeGLUMoE(f.rowsOf(b, c, 0, T), rowsIn(c, router, 0, T), ws[0], ws[1], ws[2], E, routing)
			})
		case "sigmoid":
			return extOp(f, b, func(c compute.Context, m compute.SigmoidMoEContext) compute.Tensor {
				return m.SigmoidMoE(f.rowsOf(b, c, 0, T), rowsIn(c, router, 0, T), ws[0], ws[1], ws[2], E, routing)
			})
		}
		return extOp(f, b, func(c compute.Context, m compute.MoEContext) compute.Tensor {
			return m.MoE(f.rowsOf(b, c, 0, T), rowsIn(c, router, 0, T), ws[0], ws[1], ws[2], E, routing)
		})
	}, want, nil}, nil
}
