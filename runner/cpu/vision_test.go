package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/runner/compute"
)

// TestBlockAttentionChunked: a block longer than the score budget allows at once (its
// queries in chunks) gives plain attention's result, and a block's rows are the same
// bit for bit with another block beside it as alone.
func TestBlockAttentionChunked(t *testing.T) {
	b := New(2)
	r := rand.New(rand.NewPCG(1, 2))
	const d, heads = 4, 2
	n := scoreBudget/2048 + 2100 // more rows than one chunk of queries
	cols := d * heads
	rnd := func(rows int) []float32 {
		v := make([]float32, rows*cols)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	small := 37
	q, k, v := rnd(n+small), rnd(n+small), rnd(n+small)
	run := func(q, k, v []float32, blocks []int) []float32 {
		c := b.NewContext()
		defer c.Close()
		e := c.(compute.VisionContext)
		rows := len(q) / cols
		out, err := c.Float32s(e.BlockAttention(e.Input(q, rows, cols), e.Input(k, rows, cols), e.Input(v, rows, cols), heads, 0.5, blocks))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	both := run(q, k, v, []int{n, small})
	alone := run(q[n*cols:], k[n*cols:], v[n*cols:], []int{small})
	if !slices.Equal(both[n*cols:], alone) {
		t.Error("the second block's rows differ from the block alone")
	}
	// Plain attention of a few rows of the long block.
	for _, i := range []int{0, 1, n / 2, n - 1} {
		for h := range heads {
			sc := make([]float64, n)
			m := math.Inf(-1)
			for j := range n {
				var dot float64
				for x := range d {
					dot += float64(q[i*cols+h*d+x]) * float64(k[j*cols+h*d+x])
				}
				sc[j] = dot * 0.5
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
					o += sc[j] / sum * float64(v[j*cols+h*d+x])
				}
				if math.Abs(o-float64(both[i*cols+h*d+x])) > 1e-5 {
					t.Fatalf("row %d head %d column %d: %v, want %v", i, h, x, both[i*cols+h*d+x], o)
				}
			}
		}
	}
}
