package metal_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/quality"
)

// BenchmarkDecodeKVLayouts is the decode rate of one model under several KV layouts, on
// the CPU backend and on MLX, after a prompt of MLXG_BENCH_PROMPT tokens (2048): the
// layouts take turns, a run of 16 decode steps each per round (the cache truncated back
// to the prompt after each; the order reversed every other round), and each layout's median over the rounds is reported with
// its ratio to the first layout's, measured in the same run.
//
//	go test -run '^$' -bench DecodeKVLayouts -benchtime 1x ./metal/
//
// MLXG_BENCH_MODEL is the checkpoint (default qwen3-tiny); MLXG_BENCH_LAYOUTS the
// layouts, separated by "|", each as runner/quality.ParseLayout spells them (default:
// K8/V4 with 8/8 boundary layers against the policy's default); MLXG_BENCH_ROUNDS the
// rounds (7).
func BenchmarkDecodeKVLayouts(b *testing.B) {
	dir := os.Getenv("MLXG_BENCH_MODEL")
	if dir == "" {
		dir = testdata.SharedModel(b, "qwen3-tiny")
	}
	layouts := []string{"kv-bits=8/4 kv-group-size=64/32 kv-boundary-layers=2 kv-boundary-bits=8", ""}
	if v := os.Getenv("MLXG_BENCH_LAYOUTS"); v != "" {
		layouts = strings.Split(v, "|")
	}
	prompt, rounds := envInt("MLXG_BENCH_PROMPT", 2048), envInt("MLXG_BENCH_ROUNDS", 7)
	const steps = 16
	backends := []struct {
		name string
		open func() compute.Backend
	}{
		{"cpu", func() compute.Backend { return cpu.New(2) }},
		{"mlx", func() compute.Backend { return mlxtest.Backend(b) }},
	}
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			m, err := model.Load(dir, be.open())
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			shape, err := quality.Shape(m)
			if err != nil {
				b.Fatal(err)
			}
			tokens := make([]int32, prompt+steps)
			for i := range tokens {
				tokens[i] = int32(1000 + i*37%20000)
			}
			ctx := context.Background()
			caches := make([][]kvstore.Layer, len(layouts))
			names := make([]string, len(layouts))
			for i, spec := range layouts {
				l, err := quality.ParseLayout(shape, spec)
				if err != nil {
					b.Fatal(err)
				}
				names[i] = l.Base.String()
				if l.BoundaryLayers > 0 {
					names[i] += fmt.Sprintf(" b%d", l.BoundaryLayers)
				}
				if caches[i], err = kvstore.NewCaches(shape, l); err != nil {
					b.Fatal(err)
				}
				for p := 0; p < prompt; p += 256 {
					lg, err := m.Forward(ctx, tokens[p:min(p+256, prompt)], caches[i], false)
					if err != nil {
						b.Fatal(err)
					}
					m.Recycle(lg)
				}
			}
			rates := make([][]float64, len(layouts))
			for range b.N {
				for r := 0; r <= rounds; r++ {
					for j := range layouts {
						i := j
						if r%2 == 1 { // A B, B A: the order within a round does not favour a layout
							i = len(layouts) - 1 - j
						}
						start := time.Now()
						for s := range steps {
							lg, err := m.Forward(ctx, tokens[prompt+s:prompt+s+1], caches[i], false)
							if err != nil {
								b.Fatal(err)
							}
							m.Recycle(lg)
						}
						rate := steps / time.Since(start).Seconds()
						for _, c := range caches[i] {
							if c != nil {
								if err := c.Truncate(prompt); err != nil {
									b.Fatal(err)
								}
							}
						}
						if r > 0 { // round 0 warms up
							rates[i] = append(rates[i], rate)
						}
					}
				}
			}
			base := median(rates[0])
			for i, n := range names {
				med := median(rates[i])
				b.ReportMetric(med, fmt.Sprintf("tok/s[%d]", i))
				b.Logf("%s: %s decode at %d tokens: median %.1f tok/s (%.1f–%.1f), %.3fx the first layout's",
					be.name, n, prompt, med, slices.Min(rates[i]), slices.Max(rates[i]), med/base)
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
