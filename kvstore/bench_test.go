package kvstore

import (
	"fmt"
	"math/rand/v2"
	"syscall"
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
		{"K8V8g64", Spec{K: AffineFormat(8, 64), V: AffineFormat(8, 64)}},
		{"K8V4h", Spec{K: AffineFormat(8, 64), V: AffineFormat(4, 32).Rotate(true)}},
		{"K8V4g16", Spec{K: AffineFormat(8, 64), V: AffineFormat(4, 16)}},
		{"K8V4g16h", Spec{K: AffineFormat(8, 64), V: AffineFormat(4, 16).Rotate(true)}},
		{"K8V5g64", Spec{K: AffineFormat(8, 64), V: AffineFormat(5, 64)}},
		{"K8V6g64", Spec{K: AffineFormat(8, 64), V: AffineFormat(6, 64)}},
		{"K6V6g64", Spec{K: AffineFormat(6, 64), V: AffineFormat(6, 64)}},
		{"K6V6g64h", Spec{K: AffineFormat(6, 64).Rotate(true), V: AffineFormat(6, 64).Rotate(true)}},
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

// BenchmarkAttendPrefill is the attention of a prompt's last 512-token chunk (the server's
// prefill chunk) over 4096 positions for one Qwen2-0.5B-shaped layer (14 query heads over
// 2 KV heads × 64), 2 threads, K8/V4 and fp16 caches. It reports the multiply-adds'
// rate in GFLOP/s (2 per multiply-add, scores and values, causal positions only), by the
// wall clock and by CPU time (on a shared machine the wall clock also counts waits for a
// core).
func BenchmarkAttendPrefill(b *testing.B) {
	const kvHeads, heads, dim, length, n = 2, 14, 64, 4096, 512
	r := rand.New(rand.NewPCG(12, 12))
	k, v := randVec(r, length*kvHeads*dim), randVec(r, length*kvHeads*dim)
	q, out := randVec(r, n*heads*dim), make([]float32, n*heads*dim)
	var seen float64 // (row, position) pairs the causal mask lets through
	for i := 0; i < n; i++ {
		seen += float64(length - n + i + 1)
	}
	for _, s := range []struct {
		name string
		spec Spec
	}{{"fp16", SpecF16}, {"K8V4", Spec{K: AffineFormat(8, 64), V: AffineFormat(4, 32)}}} {
		var c Layer
		if s.spec == SpecF16 {
			c, _ = NewFull(kvHeads, dim, dim, false)
		} else {
			c, _ = NewQuantized(kvHeads, dim, dim, s.spec, 0)
		}
		if err := c.Append(k, v, length); err != nil {
			b.Fatal(err)
		}
		a := Attention{Q: q, Out: out, N: n, Heads: heads, Scale: 0.125, Threads: 2}
		b.Run(s.name, func(b *testing.B) {
			c0 := cpuSeconds()
			for b.Loop() {
				if err := c.Attend(a); err != nil {
					b.Fatal(err)
				}
			}
			flops := seen * heads * dim * 4 * float64(b.N)
			b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			b.ReportMetric(flops/(cpuSeconds()-c0)/1e9, "GFLOP/cpu-s")
		})
	}
}

// cpuSeconds is the process's user and system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
