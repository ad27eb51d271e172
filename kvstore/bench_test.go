package kvstore

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkAttendDecode is one decode step's attention for one Qwen3-8B-shaped layer
// (32 query heads over 8 KV heads × 128) at 4K and 16K cached positions, per spec.
func BenchmarkAttendDecode(b *testing.B) {
	const kvHeads, heads, dim = 8, 32, 128
	r := rand.New(rand.NewPCG(11, 11))
	k, v := randVec(r, 256*kvHeads*dim), randVec(r, 256*kvHeads*dim)
	specs := []struct {
		name string
		spec Spec
	}{
		{"fp16", SpecF16},
		{"K8V4", Spec{K: AffineFormat(8, 64), V: AffineFormat(4, 32)}},
		{"K4V4", Spec{K: AffineFormat(4, 64), V: AffineFormat(4, 32)}},
		{"q4_0", Spec{K: FormatQ4_0, V: FormatQ4_0}},
	}
	for _, ctx := range []int{4096, 16384} {
		for _, s := range specs {
			b.Run(fmt.Sprintf("%s/%dK", s.name, ctx/1024), func(b *testing.B) {
				var c Layer
				if s.spec == SpecF16 {
					c, _ = NewFull(kvHeads, dim, dim, false)
				} else {
					c, _ = NewQuantized(kvHeads, dim, dim, s.spec, 0)
				}
				for p := 0; p < ctx; p += 256 {
					if err := c.Append(k, v, 256); err != nil {
						b.Fatal(err)
					}
				}
				q, out := randVec(r, heads*dim), make([]float32, heads*dim)
				a := Attention{Q: q, Out: out, N: 1, Heads: heads, Scale: 0.088, Threads: 2}
				b.ResetTimer()
				for b.Loop() {
					if err := c.Attend(a); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
