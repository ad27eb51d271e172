package backend

import (
	"math"
	"math/rand/v2"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
)

// latentCases checks multi-head latent attention's operations (compute.
// LatentAttentionContext) against plain references: MultiLinear over a stack of per-head
// matrices, float and 4-bit, and LatentAttention over an fp16 latent cache in a prefill
// and two decode steps.
func latentCases(r *rand.Rand, src source) ([]opCase, error) {
	const T, heads, in, out = 5, 3, 32, 16
	var cases []opCase
	x := randn(r, T*heads*in, 1)
	embedded(src, "mla.x", x, T, heads*in)
	for _, q := range []compute.Quant{{}, {Mode: quant.Affine, Bits: 4, GroupSize: 32}} {
		name := "MultiLinear float"
		if q.Quantized() {
			name = "MultiLinear affine 4-bit"
		}
		prefix := "mla." + name
		w, err := src.matrix(r, prefix, heads*out, in, safetensors.F16, q)
		if err != nil {
			return nil, err
		}
		for _, suffix := range []string{".weight", ".scales", ".biases"} {
			if t, ok := src[prefix+suffix]; ok {
				t.Shape = []int{heads, out, t.Shape[1]}
			}
		}
		want := make([]float32, T*heads*out)
		for t := 0; t < T; t++ {
			for h := 0; h < heads; h++ {
				for o := 0; o < out; o++ {
					var s float64
					for i := 0; i < in; i++ {
						s += float64(w[(h*out+o)*in+i]) * float64(x[(t*heads+h)*in+i])
					}
					want[(t*heads+h)*out+o] = float32(s)
				}
			}
		}
		cases = append(cases, opCase{name, []string{"LatentAttentionContext.MultiLinear"}, tolF16, func(b compute.Backend) ([]float32, error) {
			if err := compute.Supports[compute.LatentAttentionContext](b, "latent attention"); err != nil {
				return nil, err
			}
			xw, err := b.Weight(src, "mla.x", compute.Quant{})
			if err != nil {
				return nil, err
			}
			ww, err := b.Weight(src, prefix, q)
			if err != nil {
				return nil, err
			}
			return run(b, func(c compute.Context) compute.Tensor {
				l, _ := compute.Ext[compute.LatentAttentionContext](c)
				return l.MultiLinear(rowsIn(c, xw, 0, T), ww, heads)
			})
		}, want, nil})
	}

	// LatentAttention: 4 heads over a latent of 64 and a rotary key of 32, in an fp16
	// cache and an affine one (8-bit rotary keys, 4-bit latents, in groups of 32). The
	// keys and latents lie on those grids (onGrid), so that a backend quantizing a step's
	// own rows itself finds the very codes kvstore stores.
	const lheads, rope, rank, total = 4, 32, 64, 7
	steps := []int{5, 1, 1}
	qr, ql := randn(r, total*lheads*rope, 1), randn(r, total*lheads*rank, 0.3)
	kr, err := onGrid(randn(r, total*rope, 1), rope, 8, 32)
	if err != nil {
		return nil, err
	}
	lat, err := onGrid(randn(r, total*rank, 1), rank, 4, 32)
	if err != nil {
		return nil, err
	}
	embedded(src, "mla.qr", qr, total, lheads*rope)
	embedded(src, "mla.ql", ql, total, lheads*rank)
	embedded(src, "mla.kr", kr, total, rope)
	embedded(src, "mla.lat", lat, total, rank)
	scale := float32(1 / math.Sqrt(96))
	for _, kc := range []struct {
		name string
		spec kvstore.Spec
		tol  Tol
	}{
		{"fp16", kvstore.SpecF16, tolF16},
		{"affine k8/v4", kvstore.Spec{K: kvstore.AffineFormat(8, 32), V: kvstore.AffineFormat(4, 32)}, tolBF16},
	} {
		want := latentAttention(qr, ql, roundTrip(kr, kc.spec.K, rope), roundTrip(lat, kc.spec.V, rank), total, lheads, rope, rank, scale)
		spec := kc.spec
		cases = append(cases, opCase{"LatentAttention " + kc.name + " cache", []string{"LatentAttentionContext.LatentAttention"}, kc.tol, func(b compute.Backend) ([]float32, error) {
			if err := compute.Supports[compute.LatentAttentionContext](b, "latent attention"); err != nil {
				return nil, err
			}
			ws, err := weights(b, src, "mla.qr", "mla.ql", "mla.kr", "mla.lat")
			if err != nil {
				return nil, err
			}
			var cache kvstore.Layer
			if spec == kvstore.SpecF16 {
				cache, err = kvstore.NewFull(1, rope, rank, false)
			} else {
				cache, err = kvstore.NewQuantized(1, rope, rank, spec, 0)
			}
			if err != nil {
				return nil, err
			}
			var res []float32
			pos := 0
			for _, n := range steps {
				got, err := run(b, func(c compute.Context) compute.Tensor {
					l, _ := compute.Ext[compute.LatentAttentionContext](c)
					in := func(i int) compute.Tensor { return rowsIn(c, ws[i], pos, n) }
					return l.LatentAttention(in(0), in(1), in(2), in(3), cache, lheads, scale)
				})
				if err != nil {
					return nil, err
				}
				res = append(res, got...)
				pos += n
			}
			return res, nil
		}, want, nil})
	}
	return cases, nil
}

// latentAttention is the plain reference of LatentAttention: per position p and head h,
// softmax over j ≤ p of scale·(qr_h·kr_j + ql_h·lat_j), times lat_j.
func latentAttention(qr, ql, kr, lat []float32, total, heads, rope, rank int, scale float32) []float32 {
	want := make([]float32, total*heads*rank)
	for p := 0; p < total; p++ {
		for h := 0; h < heads; h++ {
			sc := make([]float64, p+1)
			m := math.Inf(-1)
			for j := 0; j <= p; j++ {
				var s float64
				for d := 0; d < rope; d++ {
					s += float64(qr[(p*heads+h)*rope+d]) * float64(kr[j*rope+d])
				}
				for d := 0; d < rank; d++ {
					s += float64(ql[(p*heads+h)*rank+d]) * float64(lat[j*rank+d])
				}
				sc[j] = s * float64(scale)
				m = max(m, sc[j])
			}
			var sum float64
			for j := range sc {
				sc[j] = math.Exp(sc[j] - m)
				sum += sc[j]
			}
			for d := 0; d < rank; d++ {
				var o float64
				for j, s := range sc {
					o += s * float64(lat[j*rank+d])
				}
				want[(p*heads+h)*rank+d] = float32(o / sum)
			}
		}
	}
	return want
}
