package kvstore

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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

// BenchmarkDecodeLayoutRatio is one layer's decode attention under the layouts the
// policy weighs, timed in turns against K8/V8 g64 (the fastest layout that meets the
// quality bar, and the default before K6h/V6h) in the same run: each
// round times every layout for about 20 ms (the order reversed every other round, so
// that none gains from its place), and each layout's median over the rounds is printed
// with its ratio to K8/V8's median. Shapes: Qwen3-8B (32 query heads over 8 KV
// heads × 128) at 4K and 16K positions, Qwen2-0.5B (14 over 2 × 64) at 2K, qwen3-tiny
// (4 over 2 × 64) at 4K and Gemma-3-27B's (32 over 16 × 128) at 4K.
//
//	go test -run '^$' -bench DecodeLayoutRatio -benchtime 1x ./kvstore/
//
// MLXG_BENCH_ROUNDS sets the rounds (15), MLXG_BENCH_THREADS the threads (2);
// MLXG_BENCH_CPUTIME=1 times one thread by the process's CPU time instead of the wall
// clock (for a shared machine).
func BenchmarkDecodeLayoutRatio(b *testing.B) {
	shapes := []struct {
		name                     string
		kvHeads, heads, dim, ctx int
	}{
		{"qwen3-8b/4K", 8, 32, 128, 4096},
		{"qwen3-8b/16K", 8, 32, 128, 16384},
		{"qwen2-0.5b/2K", 2, 14, 64, 2304},
		{"qwen3-tiny/4K", 2, 4, 64, 4096},
		{"gemma3-27b/4K", 16, 32, 128, 4096},
	}
	layouts := []struct {
		name string
		spec Spec
	}{
		{"K8/V8 g64", Spec{K: AffineFormat(8, 64), V: AffineFormat(8, 64)}}, // the baseline
		{"K6h/V6h g64", Spec{K: AffineFormat(6, 64).Rotate(true), V: AffineFormat(6, 64).Rotate(true)}},
		{"K6/V6 g64", Spec{K: AffineFormat(6, 64), V: AffineFormat(6, 64)}},
		{"K8/V4 g64/32", Spec{K: AffineFormat(8, 64), V: AffineFormat(4, 32)}},
		{"K4/V4 g64/32", Spec{K: AffineFormat(4, 64), V: AffineFormat(4, 32)}},
	}
	rounds, threads := envInt("MLXG_BENCH_ROUNDS", 15), envInt("MLXG_BENCH_THREADS", 2)
	cpuTime := os.Getenv("MLXG_BENCH_CPUTIME") == "1"
	if cpuTime {
		// The process's CPU time, one thread: on a machine whose cores other work
		// shares, the wall clock also counts the waits for a core.
		threads = 1
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	r := rand.New(rand.NewPCG(13, 13))
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			k, v := randVec(r, 256*sh.kvHeads*sh.dim), randVec(r, 256*sh.kvHeads*sh.dim)
			caches := make([]Layer, len(layouts))
			for i, l := range layouts {
				c, err := NewQuantized(sh.kvHeads, sh.dim, sh.dim, l.spec, 0)
				if err != nil {
					b.Fatal(err)
				}
				for p := 0; p < sh.ctx; p += 256 {
					if err := c.Append(k, v, min(256, sh.ctx-p)); err != nil {
						b.Fatal(err)
					}
				}
				caches[i] = c
			}
			q, out := randVec(r, sh.heads*sh.dim), make([]float32, sh.heads*sh.dim)
			a := Attention{Q: q, Out: out, N: 1, Heads: sh.heads, Scale: 0.088, Threads: threads}
			attend := func(i, reps int) time.Duration {
				start, c0 := time.Now(), cpuSeconds()
				for range reps {
					if err := caches[i].Attend(a); err != nil {
						b.Fatal(err)
					}
				}
				if cpuTime {
					return time.Duration((cpuSeconds() - c0) * 1e9 / float64(reps))
				}
				return time.Since(start) / time.Duration(reps)
			}
			reps := make([]int, len(layouts))
			for i := range layouts { // warm up, and size each turn to about 20 ms
				reps[i] = max(1, int(20*time.Millisecond/attend(i, 3)))
			}
			times := make([][]float64, len(layouts))
			for range b.N {
				for rd := 0; rd < rounds; rd++ {
					for j := range layouts {
						i := j
						if rd%2 == 1 {
							i = len(layouts) - 1 - j
						}
						times[i] = append(times[i], float64(attend(i, reps[i]).Nanoseconds())/1e6)
					}
				}
			}
			base := median(times[0])
			clock := ""
			if cpuTime {
				clock = " CPU"
			}
			for i, l := range layouts {
				med := median(times[i])
				b.ReportMetric(med/base, "x-"+strings.NewReplacer("/", "", " ", "").Replace(l.name))
				b.Logf("%s %-13s median %.3f ms%s (%.3f–%.3f) over %d rounds, %.3fx K8/V8 g64's",
					sh.name, l.name, med, clock, slices.Min(times[i]), slices.Max(times[i]), len(times[i]), med/base)
			}
		})
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func median(x []float64) float64 {
	s := slices.Sorted(slices.Values(x))
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
