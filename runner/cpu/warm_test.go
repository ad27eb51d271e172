package cpu

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/runner/compute"
)

// TestWarmNext: the backend learns which product follows which from the calls' order, the
// learned order follows a change of it, and warming the next weights leaves every result
// as it is without.
func TestWarmNext(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 71))
	const out, in = 96, 256
	ws := make([]*weight, 3)
	for i := range ws {
		packed, scales, biases, err := quant.Quantize(randVec(r, out*in), out, in, 4, 64)
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = &weight{name: "w", out: out, in: in, q: compute.Quant{Mode: quant.Affine, Bits: 4, GroupSize: 64},
			packed: packed, scales: quant.F32Scales(scales), biases: quant.F32Scales(biases)}
	}
	x := randVec(r, in)
	product := func(b *Backend, w *weight) []float32 {
		y := make([]float32, out)
		b.linear(y, x, 1, w)
		return y
	}
	prev := warmOn
	defer func() { warmOn = prev }()
	warmOn = false
	var want [3][]float32
	for i, w := range ws {
		want[i] = product(New(2), w)
	}
	warmOn = true
	b := New(2)
	for _, order := range [][]int{{0, 1, 2, 0, 1, 2, 0}, {2, 1, 0, 2, 1, 0, 2}} {
		for _, i := range order {
			if got := product(b, ws[i]); !slices.Equal(got, want[i]) {
				t.Fatalf("weight %d's product changed with warming", i)
			}
		}
		for k := 0; k+1 < len(order); k++ {
			if ws[order[k]].next.Load() != ws[order[k+1]] {
				t.Fatalf("order %v: weight %d's next is not weight %d", order, order[k], order[k+1])
			}
		}
	}
}
