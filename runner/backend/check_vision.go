package backend

import (
	"math"
	"math/rand/v2"

	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
)

// visionCases check compute.VisionContext (vision towers and per-row rotary angles)
// against plain references.
func visionCases(r *rand.Rand, src source, f feeder) []opCase {
	T, in := f.T, f.in
	var cases []opCase
	vis := func(name string, ops []string, want []float32, op func(b compute.Backend, c compute.Context, e compute.VisionContext) compute.Tensor) {
		cases = append(cases, opCase{name, ops, tolArith, func(b compute.Backend) ([]float32, error) {
			return extOp(f, b, func(c compute.Context, e compute.VisionContext) compute.Tensor { return op(b, c, e) })
		}, want, nil})
	}

	// Input round-trips; GELU both forms.
	vis("Input", []string{"VisionContext.Input"}, f.x, func(_ compute.Backend, _ compute.Context, e compute.VisionContext) compute.Tensor {
		return e.Input(f.x, T, in)
	})
	erf, tanh := make([]float32, T*in), make([]float32, T*in)
	for i, v := range f.x {
		x := float64(v)
		erf[i] = float32(0.5 * x * (1 + math.Erf(x/math.Sqrt2)))
		tanh[i] = float32(geluTanh(x))
	}
	vis("GELU", []string{"VisionContext.GELU"}, erf, func(b compute.Backend, c compute.Context, e compute.VisionContext) compute.Tensor {
		return e.GELU(f.rowsOf(b, c, 0, T), false)
	})
	vis("GELU tanh", []string{"VisionContext.GELU"}, tanh, func(b compute.Backend, c compute.Context, e compute.VisionContext) compute.Tensor {
		return e.GELU(f.rowsOf(b, c, 0, T), true)
	})

	// LayerNorm with a weight and a bias.
	lw, lb := stored(randn(r, in, 0.5), safetensors.BF16), stored(randn(r, in, 0.5), safetensors.BF16)
	src.floats("ln.weight", safetensors.BF16, []int{in}, lw)
	src.floats("ln.bias", safetensors.BF16, []int{in}, lb)
	const eps = 1e-6
	ln := make([]float32, T*in)
	for t := range T {
		row := f.x[t*in : (t+1)*in]
		var mean, vr float64
		for _, v := range row {
			mean += float64(v)
		}
		mean /= float64(in)
		for _, v := range row {
			vr += (float64(v) - mean) * (float64(v) - mean)
		}
		inv := 1 / math.Sqrt(vr/float64(in)+eps)
		for j, v := range row {
			ln[t*in+j] = float32((float64(v)-mean)*inv*float64(lw[j]) + float64(lb[j]))
		}
	}
	cases = append(cases, opCase{"LayerNorm", []string{"VisionContext.LayerNorm"}, tolArith, func(b compute.Backend) ([]float32, error) {
		w, err := b.Vector(src, "ln.weight")
		if err != nil {
			return nil, err
		}
		bias, err := b.Vector(src, "ln.bias")
		if err != nil {
			return nil, err
		}
		return extOp(f, b, func(c compute.Context, e compute.VisionContext) compute.Tensor {
			return e.LayerNorm(f.rowsOf(b, c, 0, T), w, bias, eps)
		})
	}, ln, nil})

	// RoPERows: heads of 32 columns, the first 24 rotated, each row its own angles.
	const hd, rd = 32, 24
	cos, sin := make([]float32, T*rd/2), make([]float32, T*rd/2)
	for i := range cos {
		a := r.Float64() * 2 * math.Pi
		cos[i], sin[i] = float32(math.Cos(a)), float32(math.Sin(a))
	}
	rot := append([]float32(nil), f.x...)
	for t := range T {
		for h := range in / hd {
			v := rot[t*in+h*hd:]
			for j := range rd / 2 {
				c, s := float64(cos[t*rd/2+j]), float64(sin[t*rd/2+j])
				x0, x1 := float64(v[j]), float64(v[j+rd/2])
				v[j], v[j+rd/2] = float32(x0*c-x1*s), float32(x1*c+x0*s)
			}
		}
	}
	vis("RoPERows", []string{"VisionContext.RoPERows"}, rot, func(b compute.Backend, c compute.Context, e compute.VisionContext) compute.Tensor {
		return e.RoPERows(f.rowsOf(b, c, 0, T), e.Input(cos, T, rd/2), e.Input(sin, T, rd/2), hd)
	})

	// BlockAttention: q from the first rows, k and v from the second, heads of 32, two
	// blocks.
	heads, d := in/hd, hd
	blocks := []int{T / 2, T - T/2}
	const scale = 0.17
	att := make([]float32, T*in)
	s0 := 0
	for _, n := range blocks {
		for i := s0; i < s0+n; i++ {
			for h := range heads {
				sc := make([]float64, n)
				m := math.Inf(-1)
				for j := range n {
					var dot float64
					for x := range d {
						dot += float64(f.x[i*in+h*d+x]) * float64(f.y[(s0+j)*in+h*d+x])
					}
					sc[j] = dot * scale
					m = max(m, sc[j])
				}
				var sum float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - m)
					sum += sc[j]
				}
				for x := range d {
					var o float64
					for j := range n {
						o += sc[j] / sum * float64(f.y[(s0+j)*in+h*d+x])
					}
					att[i*in+h*d+x] = float32(o)
				}
			}
		}
		s0 += n
	}
	vis("BlockAttention", []string{"VisionContext.BlockAttention"}, att, func(b compute.Backend, c compute.Context, e compute.VisionContext) compute.Tensor {
		k := f.rowsOf(b, c, T, T)
		return e.BlockAttention(f.rowsOf(b, c, 0, T), k, k, heads, scale, blocks)
	})
	return cases
}
