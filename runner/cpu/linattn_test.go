package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
)

func linExt(t *testing.T, c compute.Context) compute.LinearAttentionContext {
	t.Helper()
	l, ok := compute.Ext[compute.LinearAttentionContext](c)
	if !ok {
		t.Fatal("the CPU context is not a LinearAttentionContext")
	}
	return l
}

// TestCausalConv1D checks the convolution against a float64 reference over zero
// history, and that a sequence split in two calls (the state carried) gives the same
// rows and final state as one call.
func TestCausalConv1D(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	const T, C, K = 7, 40, 4
	x, w := randVec(r, T*C), randVec(r, C*K)
	b := New(3)
	src := source{}
	src.putFloat("conv.weight", safetensors.F32, []int{C, 1, K}, w) // Hugging Face's layout
	cw, err := b.Weight(src, "conv", compute.Quant{})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float64, T*C)
	for tt := 0; tt < T; tt++ {
		for ch := 0; ch < C; ch++ {
			var s float64
			for j := 0; j < K; j++ {
				if p := tt - (K - 1) + j; p >= 0 {
					s += float64(w[ch*K+j]) * float64(x[p*C+ch])
				}
			}
			want[tt*C+ch] = s / (1 + math.Exp(-s))
		}
	}
	xw := input(t, b, T, C, x)
	one := make([]float32, (K-1)*C)
	got := run(t, b, func(c compute.Context) compute.Tensor { return linExt(t, c).CausalConv1D(c.Embed(xw, seq(T)), cw, one) })
	closeTo(t, "conv", got, want, 1e-5)
	closeTo(t, "conv state", one, toF64(x[(T-K+1)*C:]), 0)

	two := make([]float32, (K-1)*C)
	var rows []float32
	for _, part := range [][2]int{{0, 2}, {2, T}} {
		ids := seq(T)[part[0]:part[1]]
		rows = append(rows, run(t, b, func(c compute.Context) compute.Tensor { return linExt(t, c).CausalConv1D(c.Embed(xw, ids), cw, two) })...)
	}
	closeTo(t, "conv in two calls", rows, toF64(got), 1e-6)
	if !slices.Equal(one, two) {
		t.Fatal("conv state after two calls differs from one call")
	}
}

// refGatedDelta is the gated delta rule in float64, as transformers'
// torch_recurrent_gated_delta_rule computes it (state dk × dv per head).
func refGatedDelta(q, k, v, g, beta []float32, T, H, Hk, dk, dv int, S []float64) []float64 {
	out := make([]float64, T*H*dv)
	for h := 0; h < H; h++ {
		kh := h / (H / Hk)
		st := S[h*dk*dv : (h+1)*dk*dv]
		for t := 0; t < T; t++ {
			d := math.Exp(float64(g[t*H+h]))
			for i := range st {
				st[i] *= d
			}
			mem := make([]float64, dv)
			for i := 0; i < dk; i++ {
				for j := 0; j < dv; j++ {
					mem[j] += st[i*dv+j] * float64(k[t*Hk*dk+kh*dk+i])
				}
			}
			for j := 0; j < dv; j++ {
				delta := (float64(v[t*H*dv+h*dv+j]) - mem[j]) * float64(beta[t*H+h])
				for i := 0; i < dk; i++ {
					st[i*dv+j] += float64(k[t*Hk*dk+kh*dk+i]) * delta
				}
			}
			for j := 0; j < dv; j++ {
				var s float64
				for i := 0; i < dk; i++ {
					s += st[i*dv+j] * float64(q[t*Hk*dk+kh*dk+i])
				}
				out[t*H*dv+h*dv+j] = s
			}
		}
	}
	return out
}

// TestGatedDelta checks the delta rule (4 value heads sharing 2 key heads) against
// the float64 reference, and in two calls against one.
func TestGatedDelta(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 12))
	const T, H, Hk, dk, dv = 6, 4, 2, 16, 8
	q, k, v := randVec(r, T*Hk*dk), randVec(r, T*Hk*dk), randVec(r, T*H*dv)
	for i := range q { // unit-scale keys, as after the L2 norm
		q[i] /= 4
		k[i] /= 4
	}
	g, beta := make([]float32, T*H), make([]float32, T*H)
	for i := range g {
		g[i] = -r.Float32()
		beta[i] = r.Float32()
	}
	S0 := randVec(r, H*dk*dv)
	S := toF64(S0)
	want := refGatedDelta(q, k, v, g, beta, T, H, Hk, dk, dv, S)
	b := New(3)
	ws := map[string]compute.Weight{}
	for name, m := range map[string][]float32{"q": q, "k": k, "v": v, "g": g, "beta": beta} {
		ws[name] = input(t, b, T, len(m)/T, m)
	}
	call := func(state []float32, ids []int32) []float32 {
		return run(t, b, func(c compute.Context) compute.Tensor {
			e := func(n string) compute.Tensor { return c.Embed(ws[n], ids) }
			return linExt(t, c).GatedDelta(e("q"), e("k"), e("v"), e("g"), e("beta"), H, state)
		})
	}
	one := slices.Clone(S0)
	got := call(one, seq(T))
	closeTo(t, "gated delta", got, want, 1e-4)
	closeTo(t, "gated delta state", one, S, 1e-4)
	two := slices.Clone(S0)
	rows := append(call(two, seq(T)[:1]), call(two, seq(T)[1:])...)
	closeTo(t, "gated delta in two calls", rows, toF64(got), 1e-5)
}

func TestLinearAttentionHelpers(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 13))
	const T, H = 3, 5
	a, bb := randVec(r, T*H), randVec(r, T*H)
	aLog, dt := randVec(r, H), randVec(r, H)
	b := New(2)
	src := source{}
	src.putFloat("A_log", safetensors.F32, []int{H}, aLog)
	src.putFloat("dt_bias", safetensors.F32, []int{H}, dt)
	al, _ := b.Vector(src, "A_log")
	db, _ := b.Vector(src, "dt_bias")
	aw, bw := input(t, b, T, H, a), input(t, b, T, H, bb)
	wantG, wantB, wantN := make([]float64, T*H), make([]float64, T*H), make([]float64, T*H)
	for i := range a {
		h := i % H
		wantG[i] = -math.Exp(float64(aLog[h])) * math.Log1p(math.Exp(float64(a[i]+dt[h])))
		wantB[i] = 1 / (1 + math.Exp(-float64(bb[i])))
	}
	for row := 0; row < T; row++ {
		var ss float64
		for _, v := range a[row*H : (row+1)*H] {
			ss += float64(v) * float64(v)
		}
		for j := 0; j < H; j++ {
			wantN[row*H+j] = float64(a[row*H+j]) / math.Sqrt(ss+1e-6) * 0.5
		}
	}
	closeTo(t, "g", run(t, b, func(c compute.Context) compute.Tensor {
		g, _ := linExt(t, c).DeltaGates(c.Embed(aw, seq(T)), c.Embed(bw, seq(T)), al, db)
		return g
	}), wantG, 1e-5)
	closeTo(t, "beta", run(t, b, func(c compute.Context) compute.Tensor {
		_, beta := linExt(t, c).DeltaGates(c.Embed(aw, seq(T)), c.Embed(bw, seq(T)), al, db)
		return beta
	}), wantB, 1e-6)
	closeTo(t, "l2norm", run(t, b, func(c compute.Context) compute.Tensor {
		return linExt(t, c).L2NormScale(c.Embed(aw, seq(T)), 1e-6, 0.5)
	}), wantN, 1e-6)
	joined := run(t, b, func(c compute.Context) compute.Tensor {
		l := linExt(t, c)
		x := c.Embed(aw, seq(T))
		return l.ConcatCols(l.Cols(x, 2, 3), c.Embed(bw, seq(T)), l.Cols(x, 0, 2))
	})
	var want []float64
	for row := 0; row < T; row++ {
		want = append(want, toF64(a[row*H+2:row*H+5])...)
		want = append(want, toF64(bb[row*H:(row+1)*H])...)
		want = append(want, toF64(a[row*H:row*H+2])...)
	}
	closeTo(t, "cols and concat", joined, want, 0)
}
