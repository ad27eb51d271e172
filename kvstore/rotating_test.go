package kvstore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/internal/half"
)

// refWindow is attention for the last n of length positions where each query sees only
// the window positions ending at its own: refAttention row by row over that slice.
func refWindow(q, k, v []float32, n, length, window, heads, kvHeads, kDim, vDim int, scale float64) []float32 {
	var out []float32
	kw, vw, qw := kvHeads*kDim, kvHeads*vDim, heads*kDim
	for i := 0; i < n; i++ {
		p := length - n + i
		lo := max(0, p-window+1)
		out = append(out, refAttention(q[i*qw:(i+1)*qw], k[lo*kw:(p+1)*kw], v[lo*vw:(p+1)*vw], 1, p+1-lo, heads, kvHeads, kDim, vDim, scale)...)
	}
	return out
}

func TestRotatingAttend(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	const kvHeads, heads, kDim, vDim, window = 2, 4, 64, 32, 100
	specs := []Spec{SpecF16, {K: AffineFormat(8, 64), V: AffineFormat(4, 32)}, {K: FormatQ4_0, V: FormatQ4_0}}
	for _, spec := range specs {
		for _, start := range []int{0, 50} {
			t.Run(fmt.Sprintf("%v start %d", spec, start), func(t *testing.T) {
				c, err := NewRotating(kvHeads, kDim, vDim, window, spec, start)
				if err != nil {
					t.Fatal(err)
				}
				var allK, allV []float32
				converted := 0
				// Inside the window, a chunk larger than the window, decode steps, a chunk
				// that wraps the ring, more decode.
				for _, n := range []int{30, 1, 150, 1, 1, 60, 1, 7} {
					k, v := randVec(r, n*kvHeads*kDim), randVec(r, n*kvHeads*vDim)
					if err := c.Append(k, v, n); err != nil {
						t.Fatal(err)
					}
					allK, allV = append(allK, k...), append(allV, v...)
					refK, refV := storedCache(spec, allK, allV, kvHeads, kDim, vDim, c.Len(), start, &converted)
					q := randVec(r, n*heads*kDim)
					out := make([]float32, n*heads*vDim)
					scale := float32(1 / math.Sqrt(kDim))
					if err := c.Attend(Attention{Q: q, Out: out, N: n, Heads: heads, Scale: scale, Threads: 2}); err != nil {
						t.Fatal(err)
					}
					want := refWindow(q, refK, refV, n, c.Len(), window, heads, kvHeads, kDim, vDim, float64(scale))
					for i := range want {
						if math.Abs(float64(out[i]-want[i])) > 3e-5 {
							t.Fatalf("len %d (chunk %d): element %d = %v, reference %v", c.Len(), n, i, out[i], want[i])
						}
					}
					if n == 1 && c.Bytes() > int64(window)*int64(c.Spec().TokenBytes(kvHeads, kDim, vDim)) {
						t.Fatalf("len %d: %d bytes held after a decode step, more than the window", c.Len(), c.Bytes())
					}
				}
			})
		}
	}
}

func TestRotatingTruncate(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	const dim, window = 32, 50
	c, _ := NewRotating(1, dim, dim, window, Spec{K: AffineFormat(8, 32), V: AffineFormat(4, 32)}, 0)
	for i := 0; i < 120; i++ {
		if err := c.Append(randVec(r, dim), randVec(r, dim), 1); err != nil {
			t.Fatal(err)
		}
	}
	// The ring holds 70..119: rewinding to 119 keeps the 49 before it, 110 would need 61.. (gone).
	if err := c.Truncate(110); err == nil {
		t.Fatal("rewinding past the held window accepted")
	}
	if err := c.Truncate(119); err != nil {
		t.Fatal(err)
	}
	if err := c.Append(randVec(r, dim), randVec(r, dim), 1); err != nil {
		t.Fatal(err)
	}
	q, out := randVec(r, dim), make([]float32, dim)
	if err := c.Attend(Attention{Q: q, Out: out, N: 1, Heads: 1, Scale: 0.2}); err != nil {
		t.Fatal(err)
	}
	// Still holding 70..119: rewinding to 118 would need 69.
	if err := c.Truncate(119); err != nil {
		t.Fatal(err)
	}
	if err := c.Truncate(118); err == nil {
		t.Fatal("rewinding to a window whose first position was overwritten accepted")
	}
	if _, err := NewRotating(1, dim, dim, 0, SpecF16, 0); err == nil {
		t.Fatal("window 0 accepted")
	}
	if err := c.Attend(Attention{Q: q, Out: out[:5], N: 1, Heads: 1, Scale: 0.2}); err == nil {
		t.Fatal("short output accepted")
	}
}

// Blocks lays the ring's positions out as the runs of slots they occupy: read back row by
// row they are the positions appended last, in order, across the ring's wrap.
func TestRotatingBlocks(t *testing.T) {
	const kvHeads, dim, window = 2, 32, 8
	c, err := NewRotating(kvHeads, dim, dim, window, SpecF16, 0)
	if err != nil {
		t.Fatal(err)
	}
	row := func(p, h int) []float32 { // position p, head h: values that fp16 keeps exactly
		out := make([]float32, dim)
		for j := range out {
			out[j] = float32(p*64+h*dim+j) / 8
		}
		return out
	}
	n := 0
	for _, step := range []int{5, 1, 1, 6, 1, 1, 1, 1} { // a prefill, decodes, a chunk, decodes: the ring wraps
		var k []float32
		for i := 0; i < step; i++ {
			for h := 0; h < kvHeads; h++ {
				k = append(k, row(n+i, h)...)
			}
		}
		if err := c.Append(k, k, step); err != nil {
			t.Fatal(err)
		}
		n += step
		next := -1
		for _, b := range c.Blocks() {
			if next >= 0 && b.First != next {
				t.Fatalf("after %d positions: a run starts at %d, want %d", n, b.First, next)
			}
			if b.Slot+b.Positions > b.Slots || len(b.K.Halfs) < b.Slots*kvHeads*dim {
				t.Fatalf("after %d positions: run %+v overflows its buffer", n, b)
			}
			for i := 0; i < b.Positions; i++ {
				for h := 0; h < kvHeads; h++ {
					at := ((b.Slot+i)*kvHeads + h) * dim
					got := make([]float32, dim)
					for j := range got {
						got[j] = half.F16ToF32(b.K.Halfs[at+j])
					}
					if want := row(b.First+i, h); !slices.Equal(got, want) {
						t.Fatalf("after %d positions: position %d head %d reads %v, want %v", n, b.First+i, h, got[:3], want[:3])
					}
				}
			}
			next = b.First + b.Positions
		}
		if next != n || c.Blocks()[0].First > max(0, n-(window-1)) {
			t.Fatalf("after %d positions the runs end at %d and start at %d: the window's positions are not all held", n, next, c.Blocks()[0].First)
		}
	}
}
