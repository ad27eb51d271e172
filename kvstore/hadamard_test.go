package kvstore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// hadamardMatrix is the normalized Walsh–Hadamard matrix of order n by Sylvester's
// construction, H[i][j] = (-1)^popcount(i&j) / √n.
func hadamardMatrix(n int) [][]float64 {
	h := make([][]float64, n)
	s := 1 / math.Sqrt(float64(n))
	for i := range h {
		h[i] = make([]float64, n)
		for j := range h[i] {
			sign := 1.0
			for b := i & j; b != 0; b &= b - 1 {
				sign = -sign
			}
			h[i][j] = sign * s
		}
	}
	return h
}

// refRotate is H·x row by row (rows of dim), by the matrix in float64.
func refRotate(x []float32, dim int) []float32 {
	h := hadamardMatrix(dim)
	out := make([]float32, len(x))
	for r := 0; r < len(x); r += dim {
		for i := range dim {
			var s float64
			for j := range dim {
				s += h[i][j] * float64(x[r+j])
			}
			out[r+i] = float32(s)
		}
	}
	return out
}

func TestHadamard(t *testing.T) {
	r := rand.New(rand.NewPCG(30, 1))
	for _, n := range []int{1, 2, 16, 64, 128, 256} {
		x := randVec(r, n)
		got := append([]float32(nil), x...)
		Hadamard(got)
		want := refRotate(x, n)
		for i := range want {
			if math.Abs(float64(got[i]-want[i])) > 1e-5 {
				t.Fatalf("n %d: element %d = %v, matrix %v", n, i, got[i], want[i])
			}
		}
		Hadamard(got) // its own inverse
		for i := range x {
			if math.Abs(float64(got[i]-x[i])) > 1e-5 {
				t.Fatalf("n %d: H·H·x element %d = %v, x %v", n, i, got[i], x[i])
			}
		}
	}
}

// TestRotatedAttendExact: the rotation folded into attention changes nothing in exact
// arithmetic: over a float32 cache that stores rotated keys and values, the rotated
// query's attention rotated back is the plain attention, within float32 error.
func TestRotatedAttendExact(t *testing.T) {
	r := rand.New(rand.NewPCG(30, 2))
	const kvHeads, heads, dim = 2, 6, 64
	for _, rot := range [][2]bool{{true, false}, {false, true}, {true, true}} {
		plain, _ := NewFull(kvHeads, dim, dim, true)
		stored, _ := NewFull(kvHeads, dim, dim, true)
		c := kvCodecs{kvHeads: kvHeads, kDim: dim, vDim: dim, spec: Spec{K: FormatF16.Rotate(rot[0]), V: FormatF16.Rotate(rot[1])}}
		for _, n := range []int{300, 1, 5} {
			k, v := randVec(r, n*kvHeads*dim), randVec(r, n*kvHeads*dim)
			if err := plain.Append(k, v, n); err != nil {
				t.Fatal(err)
			}
			rk, rv := c.rotate(k, v)
			if err := stored.Append(rk, rv, n); err != nil {
				t.Fatal(err)
			}
			q := randVec(r, n*heads*dim)
			want, got := make([]float32, n*heads*dim), make([]float32, n*heads*dim)
			if err := plain.Attend(Attention{Q: q, Out: want, N: n, Heads: heads, Scale: 0.125, Threads: 2}); err != nil {
				t.Fatal(err)
			}
			if err := c.rotatedAttend(Attention{Q: q, Out: got, N: n, Heads: heads, Scale: 0.125, Threads: 2}, stored.Attend); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if math.Abs(float64(got[i]-want[i])) > 1e-5*max(1, math.Abs(float64(want[i]))) {
					t.Fatalf("rotate %v, len %d: element %d = %v, unrotated %v", rot, plain.Len(), i, got[i], want[i])
				}
			}
		}
	}
}

// TestRotatedLayouts: each rotated or group-16 layout's cache attends as the plain
// reference that rotates, quantizes, dequantizes and attends (refDequant), for both
// cache kinds, quantized from the first position and after quantized_kv_start.
func TestRotatedLayouts(t *testing.T) {
	r := rand.New(rand.NewPCG(30, 3))
	const kvHeads, heads, dim, window = 2, 4, 64, 100
	a := AffineFormat
	specs := []Spec{
		{K: a(8, 64).Rotate(true), V: a(4, 32)},
		{K: a(8, 64), V: a(4, 32).Rotate(true)},
		{K: a(8, 64).Rotate(true), V: a(4, 32).Rotate(true)},
		{K: a(8, 64), V: a(4, 16)},
		{K: a(8, 64).Rotate(true), V: a(4, 16).Rotate(true)},
		{K: a(8, 64), V: a(6, 32)},
		{K: a(8, 64), V: a(5, 32)},
		{K: FormatQ4_0.Rotate(true), V: FormatQ4_0.Rotate(true)},
	}
	for _, spec := range specs {
		for _, start := range []int{0, 50} {
			for _, ring := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v start %d ring %v", spec, start, ring), func(t *testing.T) {
					var c interface {
						Layer
						Spec() Spec
					}
					var err error
					if ring {
						c, err = NewRotating(kvHeads, dim, dim, window, spec, start)
					} else {
						c, err = NewQuantized(kvHeads, dim, dim, spec, start)
					}
					if err != nil {
						t.Fatal(err)
					}
					var allK, allV []float32
					converted := 0
					for _, n := range []int{30, 1, 150, 1, 7} {
						k, v := randVec(r, n*kvHeads*dim), randVec(r, n*kvHeads*dim)
						if err := c.Append(k, v, n); err != nil {
							t.Fatal(err)
						}
						allK, allV = append(allK, k...), append(allV, v...)
						refK, refV := storedCache(spec, allK, allV, kvHeads, dim, dim, c.Len(), start, &converted)
						q := randVec(r, n*heads*dim)
						out := make([]float32, n*heads*dim)
						scale := float32(1 / math.Sqrt(dim))
						if err := c.Attend(Attention{Q: q, Out: out, N: n, Heads: heads, Scale: scale, Threads: 2}); err != nil {
							t.Fatal(err)
						}
						want := refAttention(q, refK, refV, n, c.Len(), heads, kvHeads, dim, dim, float64(scale))
						if ring {
							want = refWindow(q, refK, refV, n, c.Len(), window, heads, kvHeads, dim, dim, float64(scale))
						}
						for i := range want {
							if math.Abs(float64(out[i]-want[i])) > 5e-5 {
								t.Fatalf("len %d: element %d = %v, reference %v", c.Len(), i, out[i], want[i])
							}
						}
					}
					if c.Spec() != spec {
						t.Errorf("Spec() = %v, want %v", c.Spec(), spec)
					}
				})
			}
		}
	}
}

func TestRotationNeedsPowerOfTwo(t *testing.T) {
	if _, err := NewQuantized(1, 96, 96, Spec{K: AffineFormat(8, 32).Rotate(true), V: AffineFormat(4, 32)}, 0); err == nil {
		t.Error("a rotated layout over head_dim 96 accepted")
	}
	if _, err := NewQuantized(1, 96, 96, Spec{K: AffineFormat(8, 32), V: AffineFormat(4, 32)}, 0); err != nil {
		t.Errorf("the unrotated layout over head_dim 96: %v", err)
	}
}

// TestHadamardSIMD: the vector kernel rotates bit for bit as the plain loops, for every
// power-of-two length a head may have.
func TestHadamardSIMD(t *testing.T) {
	if !hadamardSIMD {
		t.Skip("no Hadamard kernel on this CPU")
	}
	r := rand.New(rand.NewPCG(30, 2))
	for n := 1; n <= 1024; n *= 2 {
		x := randVec(r, n)
		for i := range x {
			x[i] *= float32(1 + i%7) // varied magnitudes, so that rounding differs if the order does
		}
		fast, plain := append([]float32(nil), x...), append([]float32(nil), x...)
		Hadamard(fast)
		hadamardSIMD = false
		Hadamard(plain)
		hadamardSIMD = true
		for i := range fast {
			if math.Float32bits(fast[i]) != math.Float32bits(plain[i]) {
				t.Fatalf("n %d: element %d = %v, plain loops %v", n, i, fast[i], plain[i])
			}
		}
	}
}
