package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
)

// refSelect is the router rule in float64: softmax, the k largest, renormalised.
func refSelect(logits []float32, k int, norm bool) ([]int, []float64) {
	p := make([]float64, len(logits))
	var sum float64
	for i, v := range logits {
		p[i] = math.Exp(float64(v))
		sum += p[i]
	}
	used := make([]bool, len(p))
	var es []int
	var ws []float64
	var top float64
	for range k {
		best := -1
		for i := range p {
			if !used[i] && (best < 0 || p[i] > p[best]) {
				best = i
			}
		}
		used[best] = true
		es, ws = append(es, best), append(ws, p[best]/sum)
		top += p[best] / sum
	}
	if norm {
		for i := range ws {
			ws[i] /= top
		}
	}
	return es, ws
}

func TestRoutingSelect(t *testing.T) {
	if es, _ := (compute.Routing{TopK: 3}).Select([]float32{1, 3, 3, 2, 3, 0}); es[0] != 1 || es[1] != 2 || es[2] != 4 {
		t.Errorf("ties picked %v, want the lower indices first: [1 2 4]", es)
	}
	r := rand.New(rand.NewPCG(7, 7))
	for _, norm := range []bool{true, false} {
		for range 50 {
			logits := randVec(r, 64)
			es, ws := compute.Routing{TopK: 8, NormTopK: norm}.Select(logits)
			wantE, wantW := refSelect(logits, 8, norm)
			for i := range wantE {
				if es[i] != wantE[i] || math.Abs(float64(ws[i])-wantW[i]) > 1e-6 {
					t.Fatalf("norm %v: picked %v %v, reference %v %v", norm, es, ws, wantE, wantW)
				}
			}
		}
	}
}

// TestMoE checks the expert block, with float and 4-bit stacked experts, for a decode
// row and a prefill, against a float64 reference over the dequantized experts; the
// experts no token picks hold NaN, which must not reach the output (they are not read).
func TestMoE(t *testing.T) { bothKernels(t, testMoE) }

func testMoE(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	const E, k, hidden, inter = 8, 2, 64, 96
	for _, quantized := range []bool{false, true} {
		for _, T := range []int{1, 6} {
			x := randVec(r, T*hidden)
			router := randVec(r, T*E)
			picked := map[int]bool{}
			for t := 0; t < T; t++ {
				es, _ := refSelect(router[t*E:(t+1)*E], k, true)
				for _, e := range es {
					picked[e] = true
				}
			}
			src, mats := source{}, map[string][]float32{}
			for _, m := range []struct {
				name    string
				out, in int
			}{{"gate", inter, hidden}, {"up", inter, hidden}, {"down", hidden, inter}} {
				w := randVec(r, E*m.out*m.in)
				for i := range w {
					w[i] /= float32(math.Sqrt(float64(m.in)))
				}
				if !quantized {
					for e := range E {
						if !picked[e] {
							for i := e * m.out * m.in; i < (e+1)*m.out*m.in; i++ {
								w[i] = float32(math.NaN())
							}
						}
					}
					src.putFloat(m.name+".weight", safetensors.F32, []int{E, m.out, m.in}, w)
					mats[m.name] = w
					continue
				}
				packed, scales, biases, err := quant.Quantize(w, E*m.out, m.in, 4, 32)
				if err != nil {
					t.Fatal(err)
				}
				for e := range E {
					if !picked[e] {
						gpr := m.in / 32
						for i := e * m.out * gpr; i < (e+1)*m.out*gpr; i++ {
							scales[i] = float32(math.NaN())
						}
					}
				}
				src.putU32(m.name+".weight", []int{E, m.out, m.in / 8}, packed)
				src.putFloat(m.name+".scales", safetensors.F32, []int{E, m.out, m.in / 32}, scales)
				src.putFloat(m.name+".biases", safetensors.F32, []int{E, m.out, m.in / 32}, biases)
				mats[m.name], err = quant.Dequantize(packed, scales, biases, E*m.out, m.in, 4, 32)
				if err != nil {
					t.Fatal(err)
				}
			}
			want := make([]float64, T*hidden)
			for t := 0; t < T; t++ {
				xt := x[t*hidden : (t+1)*hidden]
				es, ws := refSelect(router[t*E:(t+1)*E], k, true)
				for i, e := range es {
					g := refLinear(xt, mats["gate"][e*inter*hidden:], nil, 1, inter, hidden)
					u := refLinear(xt, mats["up"][e*inter*hidden:], nil, 1, inter, hidden)
					h := make([]float32, inter)
					for j := range h {
						h[j] = float32(g[j] / (1 + math.Exp(-g[j])) * u[j])
					}
					y := refLinear(h, mats["down"][e*hidden*inter:], nil, 1, hidden, inter)
					for j := range y {
						want[t*hidden+j] += ws[i] * y[j]
					}
				}
			}
			q := compute.Quant{}
			if quantized {
				q = compute.Quant{Mode: quant.Affine, Bits: 4, GroupSize: 32}
			}
			b := New(3)
			bind := func(name string) compute.Weight {
				w, err := b.Weight(src, name, q)
				if err != nil {
					t.Fatal(err)
				}
				return w
			}
			gate, up, down := bind("gate"), bind("up"), bind("down")
			xw, rw := input(t, b, T, hidden, x), input(t, b, T, E, router)
			got := run(t, b, func(c compute.Context) compute.Tensor {
				m, ok := compute.Ext[compute.MoEContext](c)
				if !ok {
					t.Fatal("the CPU context is not a MoEContext")
				}
				return m.MoE(c.Embed(xw, seq(T)), c.Embed(rw, seq(T)), gate, up, down, E, compute.Routing{TopK: k, NormTopK: true})
			})
			closeTo(t, "MoE", got, want, 1e-4)
		}
	}
}

func TestActivations(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	b := New(2)
	const T, C = 5, 24
	x, y := randVec(r, T*C), randVec(r, T*C)
	gh := randVec(r, T*3) // one gate per group of 8 columns
	xw, yw, gw := input(t, b, T, C, x), input(t, b, T, C, y), input(t, b, T, 3, gh)
	src := source{}
	nw := randVec(r, C)
	src.putFloat("n", safetensors.F32, []int{C}, nw)
	norm, err := b.Vector(src, "n")
	if err != nil {
		t.Fatal(err)
	}
	ext := func(c compute.Context) compute.ActivationContext {
		a, ok := compute.Ext[compute.ActivationContext](c)
		if !ok {
			t.Fatal("the CPU context is not an ActivationContext")
		}
		return a
	}
	sig := func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }
	want := map[string][]float64{}
	for _, name := range []string{"gelu", "scale", "softcap", "sigmoid", "sigmoidGroup", "norm", "clamp"} {
		want[name] = make([]float64, T*C)
	}
	for i := range x {
		a, u := float64(x[i]), float64(y[i])
		want["gelu"][i] = 0.5 * a * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(a+0.044715*a*a*a))) * u
		want["scale"][i] = a * 1.5
		want["clamp"][i] = min(max(a, -0.3), 0.4) // randVec's values reach past both bounds
		want["softcap"][i] = 3 * math.Tanh(a/3)
		want["sigmoid"][i] = a * sig(u)
		want["sigmoidGroup"][i] = a * sig(float64(gh[(i/C)*3+(i%C)/8]))
	}
	for t := 0; t < T; t++ {
		var ss float64
		for _, v := range x[t*C : (t+1)*C] {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/C+1e-6)
		for j := 0; j < C; j++ {
			want["norm"][t*C+j] = float64(x[t*C+j]) * inv * (1 + float64(nw[j]))
		}
	}
	for name, op := range map[string]func(c compute.Context) compute.Tensor{
		"gelu":    func(c compute.Context) compute.Tensor { return ext(c).GeGLU(c.Embed(xw, seq(T)), c.Embed(yw, seq(T))) },
		"scale":   func(c compute.Context) compute.Tensor { return ext(c).Scale(c.Embed(xw, seq(T)), 1.5) },
		"softcap": func(c compute.Context) compute.Tensor { return ext(c).SoftCap(c.Embed(xw, seq(T)), 3) },
		"sigmoid": func(c compute.Context) compute.Tensor {
			return ext(c).SigmoidMul(c.Embed(xw, seq(T)), c.Embed(yw, seq(T)))
		},
		"sigmoidGroup": func(c compute.Context) compute.Tensor {
			return ext(c).SigmoidMul(c.Embed(xw, seq(T)), c.Embed(gw, seq(T)))
		},
		"norm": func(c compute.Context) compute.Tensor {
			return ext(c).RMSNormOffset(c.Embed(xw, seq(T)), norm, 1, 1e-6)
		},
		"clamp": func(c compute.Context) compute.Tensor {
			cl, ok := compute.Ext[compute.ClampContext](c)
			if !ok {
				t.Fatal("the CPU context is not a ClampContext")
			}
			return cl.Clamp(c.Embed(xw, seq(T)), -0.3, 0.4)
		},
	} {
		closeTo(t, name, run(t, b, op), want[name], 1e-5)
	}
}

// TestClampedMoE checks gpt-oss's expert block (ClampedMoE): biases on every expert's
// gate, up and down rows, the clamped SwiGLU with gates and ups beyond the limit, and
// the softmax over the top k logits, with float and mxfp4 experts, for a decode row and
// a prefill, against a float64 reference over the decoded experts.
func TestClampedMoE(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	const E, k, hidden, inter = 4, 2, 64, 32
	act := compute.ClampedSwiGLU{Alpha: 1.702, Limit: 7}
	routing := compute.Routing{TopK: k, SoftmaxTopK: true}
	for _, mxfp4 := range []bool{false, true} {
		for _, T := range []int{1, 5} {
			x, router := randVec(r, T*hidden), randVec(r, T*E)
			src, mats, biases := source{}, map[string][]float32{}, map[string][]float32{}
			for _, m := range []struct {
				name    string
				out, in int
				scale   float32
			}{{"gate", inter, hidden, 1.5}, {"up", inter, hidden, 1.5}, {"down", hidden, inter, 0.2}} {
				w := randVec(r, E*m.out*m.in)
				for i := range w {
					w[i] *= m.scale // gates and ups of several units: the clamp at 7 matters
				}
				bias := randVec(r, E*m.out)
				src.putFloat(m.name+".bias", safetensors.F32, []int{E, m.out}, bias)
				biases[m.name] = bias
				if !mxfp4 {
					src.putFloat(m.name+".weight", safetensors.F32, []int{E, m.out, m.in}, w)
					mats[m.name] = w
					continue
				}
				packed, sc := make([]uint32, E*m.out*m.in/8), make([]uint8, E*m.out*m.in/32)
				for row := 0; row < E*m.out; row++ {
					quant.QuantizeMXFP4Row(packed[row*m.in/8:(row+1)*m.in/8], sc[row*m.in/32:(row+1)*m.in/32], w[row*m.in:(row+1)*m.in])
				}
				src.putU32(m.name+".weight", []int{E, m.out, m.in / 8}, packed)
				src[m.name+".scales"] = &safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: m.name + ".scales", DType: safetensors.U8,
					Shape: []int{E, m.out, m.in / 32}, End: int64(len(sc))}, Data: sc}
				var err error
				if mats[m.name], err = quant.DequantizeFP(quant.MXFP4, packed, sc, E*m.out, m.in); err != nil {
					t.Fatal(err)
				}
			}
			want := make([]float64, T*hidden)
			clamped := 0
			for t := 0; t < T; t++ {
				xt, lt := x[t*hidden:(t+1)*hidden], router[t*E:(t+1)*E]
				es, _ := refSelect(lt, k, true)
				var z float64
				for _, e := range es {
					z += math.Exp(float64(lt[e]))
				}
				for _, e := range es {
					g := refLinear(xt, mats["gate"][e*inter*hidden:], biases["gate"][e*inter:], 1, inter, hidden)
					u := refLinear(xt, mats["up"][e*inter*hidden:], biases["up"][e*inter:], 1, inter, hidden)
					h := make([]float32, inter)
					for j := range h {
						gj, uj := math.Min(g[j], 7), math.Max(math.Min(u[j], 7), -7)
						if gj != g[j] || uj != u[j] {
							clamped++
						}
						h[j] = float32(gj / (1 + math.Exp(-1.702*gj)) * (uj + 1))
					}
					y := refLinear(h, mats["down"][e*hidden*inter:], biases["down"][e*hidden:], 1, hidden, inter)
					for j := range y {
						want[t*hidden+j] += math.Exp(float64(lt[e])) / z * y[j]
					}
				}
			}
			if clamped == 0 {
				t.Fatal("no gate or up value reached the clamp: the test does not exercise it")
			}
			q := compute.Quant{}
			if mxfp4 {
				q = compute.Quant{Mode: quant.MXFP4, Bits: 4, GroupSize: 32}
			}
			b := New(3)
			bind := func(name string) compute.Weight {
				w, err := b.Weight(src, name, q)
				if err != nil {
					t.Fatal(err)
				}
				return w
			}
			gate, up, down := bind("gate"), bind("up"), bind("down")
			xw, rw := input(t, b, T, hidden, x), input(t, b, T, E, router)
			got := run(t, b, func(c compute.Context) compute.Tensor {
				m, ok := compute.Ext[compute.ClampedMoEContext](c)
				if !ok {
					t.Fatal("the CPU context is not a ClampedMoEContext")
				}
				return m.ClampedMoE(c.Embed(xw, seq(T)), c.Embed(rw, seq(T)), gate, up, down, E, routing, act)
			})
			closeTo(t, "ClampedMoE", got, want, 1e-4)
		}
	}
}

// TestSoftmaxTopK: the softmax over the top k logits gives the renormalised weights.
func TestSoftmaxTopK(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 10))
	for range 50 {
		logits := randVec(r, 32)
		es, ws := compute.Routing{TopK: 4, SoftmaxTopK: true}.Select(logits)
		wantE, wantW := refSelect(logits, 4, true)
		for i := range wantE {
			if es[i] != wantE[i] || math.Abs(float64(ws[i])-wantW[i]) > 1e-6 {
				t.Fatalf("picked %v %v, reference %v %v", es, ws, wantE, wantW)
			}
		}
	}
}
