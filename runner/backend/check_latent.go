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

	// LatentAttention: 4 heads over a latent of 64 and a rotary key of 32, fp16 cache.
	const lheads, rope, rank, total = 4, 32, 64, 7
	steps := []int{5, 1, 1}
	qr, ql := randn(r, total*lheads*rope, 1), randn(r, total*lheads*rank, 0.3)
	kr, lat := randn(r, total*rope, 1), randn(r, total*rank, 1)
	embedded(src, "mla.qr", qr, total, lheads*rope)
	embedded(src, "mla.ql", ql, total, lheads*rank)
	embedded(src, "mla.kr", kr, total, rope)
	embedded(src, "mla.lat", lat, total, rank)
	scale := float32(1 / math.Sqrt(96))
	krs, lats := roundTrip(kr, kvstore.SpecF16.K, rope), roundTrip(lat, kvstore.SpecF16.V, rank)
	want := make([]float32, total*lheads*rank)
	for p := 0; p < total; p++ {
		for h := 0; h < lheads; h++ {
			sc := make([]float64, p+1)
			m := math.Inf(-1)
			for j := 0; j <= p; j++ {
				var s float64
				for d := 0; d < rope; d++ {
					s += float64(qr[(p*lheads+h)*rope+d]) * float64(krs[j*rope+d])
				}
				for d := 0; d < rank; d++ {
					s += float64(ql[(p*lheads+h)*rank+d]) * float64(lats[j*rank+d])
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
					o += s * float64(lats[j*rank+d])
				}
				want[(p*lheads+h)*rank+d] = float32(o / sum)
			}
		}
	}
	cases = append(cases, opCase{"LatentAttention fp16 cache", []string{"LatentAttentionContext.LatentAttention"}, tolF16, func(b compute.Backend) ([]float32, error) {
		if err := compute.Supports[compute.LatentAttentionContext](b, "latent attention"); err != nil {
			return nil, err
		}
		ws, err := weights(b, src, "mla.qr", "mla.ql", "mla.kr", "mla.lat")
		if err != nil {
			return nil, err
		}
		cache, err := kvstore.NewFull(1, rope, rank, false)
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
	return cases, nil
}
