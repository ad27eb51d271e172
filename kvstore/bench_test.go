package kvstore

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkAttendDecode is one decode step's attention for one layer, 2 threads, per
// spec: Qwen3-8B's shape (32 query heads over 8 KV heads × 128) at 4K and 16K cached
// positions, and Qwen2-0.5B's (14 over 2 × 64) at 2K and 16K. Quantized caches run the
// group kernels and the pair kernels in turn ("group" and "pairs"), for a ratio in one
// run (on amd64; elsewhere both run the tile path).
func BenchmarkAttendDecode(b *testing.B) {
	shapes := []struct {
		name                string
		kvHeads, heads, dim int
		contexts            []int
	}{
		{"qwen3-8b", 8, 32, 128, []int{4096, 16384}},
		{"qwen2-0.5b", 2, 14, 64, []int{2304, 16384}},
	}
	specs := []struct {
		name string
		spec Spec
	}{
		{"fp16", SpecF16},
		{"K8V4", Spec{K: AffineFormat(8, 64), V: AffineFormat(4, 32)}},
		{"K4V4", Spec{K: AffineFormat(4, 64), V: AffineFormat(4, 32)}},
		{"q4_0", Spec{K: FormatQ4_0, V: FormatQ4_0}},
	}
	r := rand.New(rand.NewPCG(11, 11))
	for _, sh := range shapes {
		k, v := randVec(r, 256*sh.kvHeads*sh.dim), randVec(r, 256*sh.kvHeads*sh.dim)
		for _, ctx := range sh.contexts {
			for _, s := range specs {
				var c Layer
				if s.spec == SpecF16 {
					c, _ = NewFull(sh.kvHeads, sh.dim, sh.dim, false)
				} else {
					c, _ = NewQuantized(sh.kvHeads, sh.dim, sh.dim, s.spec, 0)
				}
				for p := 0; p < ctx; p += 256 {
					if err := c.Append(k, v, 256); err != nil {
						b.Fatal(err)
					}
				}
				q, out := randVec(r, sh.heads*sh.dim), make([]float32, sh.heads*sh.dim)
				a := Attention{Q: q, Out: out, N: 1, Heads: sh.heads, Scale: 0.088, Threads: 2}
				kernels := []string{"group", "pairs"}
				if s.spec == SpecF16 {
					kernels = kernels[:1]
				}
				for _, kern := range kernels {
					b.Run(fmt.Sprintf("%s/%s/%dK/%s", sh.name, s.name, ctx/1024, kern), func(b *testing.B) {
						groupKernels = kern == "group"
						defer func() { groupKernels = true }()
						for b.Loop() {
							if err := c.Attend(a); err != nil {
								b.Fatal(err)
							}
						}
					})
				}
			}
		}
	}
}
