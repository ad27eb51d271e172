package kvstore

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// A pass of several rows in exact-row mode attends each row bit for bit as a decode step
// at its position does, for every kind, quantized or not, across block boundaries, and
// after Truncate rolls rejected rows back.
func TestExactRowsMatchDecodeSteps(t *testing.T) {
	const kvHeads, heads, dim = 2, 4, 64
	r := rand.New(rand.NewPCG(3, 4))
	rnd := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	makers := map[string]func() Layer{
		"full": func() Layer { c, _ := NewFull(kvHeads, dim, dim, false); return c },
		"quantized": func() Layer {
			c, _ := NewQuantized(kvHeads, dim, dim, Spec{K: AffineFormat(8, 64), V: AffineFormat(4, 32)}, 0)
			return c
		},
		"rotating": func() Layer {
			c, _ := NewRotating(kvHeads, dim, dim, 40, Spec{K: AffineFormat(8, 64), V: AffineFormat(4, 32)}, 0)
			return c
		},
	}
	const total = 300
	ks, vs, qs := rnd(total*kvHeads*dim), rnd(total*kvHeads*dim), rnd(total*heads*dim)
	kw, qw := kvHeads*dim, heads*dim
	for name, mk := range makers {
		t.Run(name, func(t *testing.T) {
			for _, threads := range []int{1, 4} {
				// Decode: one position at a time.
				dec := mk()
				want := make([]float32, total*qw)
				for p := 0; p < total; p++ {
					if err := dec.Append(ks[p*kw:(p+1)*kw], vs[p*kw:(p+1)*kw], 1); err != nil {
						t.Fatal(err)
					}
					if err := dec.Attend(Attention{Q: qs[p*qw : (p+1)*qw], Out: want[p*qw : (p+1)*qw], N: 1, Heads: heads, Scale: 0.125, Threads: threads}); err != nil {
						t.Fatal(err)
					}
				}
				// Verification passes of 1 to 7 rows, some rows rolled back and redone.
				c := mk()
				SetExactRows([]Layer{c}, true)
				got := make([]float32, total*qw)
				for p, step := 0, 0; p < total; step++ {
					n := min(1+step%7, total-p)
					if err := c.Append(ks[p*kw:(p+n)*kw], vs[p*kw:(p+n)*kw], n); err != nil {
						t.Fatal(err)
					}
					if err := c.Attend(Attention{Q: qs[p*qw : (p+n)*qw], Out: got[p*qw : (p+n)*qw], N: n, Heads: heads, Scale: 0.125, Threads: threads}); err != nil {
						t.Fatal(err)
					}
					keep := n
					if step%3 == 1 && n > 1 {
						keep = n / 2
					}
					if err := c.Truncate(p + keep); err != nil {
						t.Fatal(err)
					}
					p += keep
				}
				if !slices.Equal(got, want) {
					t.Fatalf("threads %d: exact-row passes differ from decode steps", threads)
				}
			}
		})
	}
}

// NextConversion is the length whose Append converts an fp16-first cache, until it has.
func TestNextConversion(t *testing.T) {
	q, _ := NewQuantized(1, 32, 32, Spec{K: AffineFormat(4, 32), V: AffineFormat(4, 32)}, 10)
	f, _ := NewFull(1, 32, 32, false)
	caches := []Layer{f, q}
	if at := NextConversion(caches); at != 10 {
		t.Fatalf("NextConversion %d, want 10", at)
	}
	x := make([]float32, 10*32)
	if err := q.Append(x, x, 10); err != nil {
		t.Fatal(err)
	}
	if at := NextConversion(caches); at != -1 {
		t.Fatalf("NextConversion after converting: %d", at)
	}
}

func TestDropCheckpoint(t *testing.T) {
	r, _ := NewRecurrent(4)
	r.Advance(3)
	r.Checkpoint()
	if !r.HasCheckpoint(3) {
		t.Fatal("no checkpoint at 3")
	}
	r.DropCheckpoint(3)
	if r.HasCheckpoint(3) || r.Bytes() != r.StateBytes() {
		t.Fatal("checkpoint kept")
	}
}
