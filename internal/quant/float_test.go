package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestFloatKernels checks DotRows4, DotRows4x2 and AxpyRows4 against float64 sums for
// lengths around the 8- and 16-wide steps, with the assembly kernels and without.
func TestFloatKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	for _, on := range []bool{true, false} {
		prev := SetSIMD(on)
		for n := 1; n <= 41; n++ {
			stride := n + r.IntN(5)
			x0, x1, w := randMatrix(r, n), randMatrix(r, n), randMatrix(r, 3*stride+n)
			var got [4]float32
			var got2 [8]float32
			DotRows4(&got, x0, w, stride)
			DotRows4x2(&got2, x0, x1, w, stride)
			y := randMatrix(r, n)
			y0 := append([]float32(nil), y...)
			p := [4]float32{0.5, -1, 2, 0.25}
			AxpyRows4(y, w, stride, &p)
			for k := 0; k < 4; k++ {
				var a, b float64
				for i := 0; i < n; i++ {
					a += float64(x0[i]) * float64(w[k*stride+i])
					b += float64(x1[i]) * float64(w[k*stride+i])
				}
				if math.Abs(float64(got[k])-a) > 1e-6 || math.Abs(float64(got2[k])-a) > 1e-6 || math.Abs(float64(got2[4+k])-b) > 1e-6 {
					t.Fatalf("simd=%v n=%d row %d: DotRows4 %v, DotRows4x2 %v %v, reference %v %v", simd, n, k, got[k], got2[k], got2[4+k], a, b)
				}
			}
			for i := 0; i < n; i++ {
				want := float64(y0[i])
				for k := 0; k < 4; k++ {
					want += float64(p[k]) * float64(w[k*stride+i])
				}
				if math.Abs(float64(y[i])-want) > 1e-6 {
					t.Fatalf("simd=%v n=%d: AxpyRows4 element %d = %v, reference %v", simd, n, i, y[i], want)
				}
			}
		}
		SetSIMD(prev)
	}
}

// TestDotAxpy checks Dot and Axpy against float64 sums, for lengths on either side of
// the four partial sums.
func TestDotAxpy(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 12))
	for n := 0; n <= 9; n++ {
		a, b, y := randMatrix(r, n), randMatrix(r, n+2), randMatrix(r, n)
		y0 := append([]float32(nil), y...)
		var want float64
		for i := range a {
			want += float64(a[i]) * float64(b[i])
		}
		if got := Dot(a, b); math.Abs(float64(got)-want) > 1e-6 {
			t.Fatalf("n=%d: Dot %v, reference %v", n, got, want)
		}
		Axpy(y, b, 0.5)
		for i := range y {
			if want := float64(y0[i]) + 0.5*float64(b[i]); math.Abs(float64(y[i])-want) > 1e-6 {
				t.Fatalf("n=%d: Axpy element %d = %v, reference %v", n, i, y[i], want)
			}
		}
	}
}

// TestWidenF16 converts every fp16 value, at every offset within a run of 8, with the
// assembly kernel and without, against a reference conversion.
func TestWidenF16(t *testing.T) {
	for _, on := range []bool{true, false} {
		prev := SetSIMD(on)
		src := make([]uint16, 1<<16+5)
		for i := range src {
			src[i] = uint16(i)
		}
		for _, off := range []int{0, 3} {
			dst := make([]float32, len(src)-off)
			WidenF16(dst, src[off:])
			for i, h := range src[off:] {
				want := refF16(h)
				if math.Float32bits(dst[i]) != math.Float32bits(want) && !(want != want && dst[i] != dst[i]) {
					t.Fatalf("simd=%v: WidenF16(%#04x) = %v, want %v", simd, h, dst[i], want)
				}
			}
		}
		SetSIMD(prev)
	}
}

// refF16 is fp16 -> float32 by its definition: (-1)^s · 2^(e-15) · (1 + m/1024), or
// 2^-14 · m/1024 for subnormals.
func refF16(h uint16) float32 {
	s, e, m := h>>15, int(h>>10&31), float64(h&1023)
	var v float64
	switch {
	case e == 31 && m == 0:
		v = math.Inf(1)
	case e == 31:
		return float32(math.NaN())
	case e == 0:
		v = math.Ldexp(m/1024, -14)
	default:
		v = math.Ldexp(1+m/1024, e-15)
	}
	if s == 1 {
		v = -v
	}
	return float32(v)
}

func TestExp32(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for i := 0; i < 200000; i++ {
		x := float32(r.Float64()*175 - 87)
		want := math.Exp(float64(x))
		if got := float64(exp32(x)); math.Abs(got-want) > 3e-7*want {
			t.Fatalf("exp32(%v) = %v, want %v", x, got, want)
		}
	}
	if !math.IsInf(float64(exp32(100)), 1) || exp32(-100) != 0 {
		t.Fatal("exp32 does not saturate")
	}
}

// TestSwiGLU compares SwiGLU, with and without the assembly kernel, against float64 on
// ordinary and extreme gate values.
func TestSwiGLU(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	const n = 1003
	g, u := make([]float32, n), randMatrix(r, n)
	for i := range g {
		g[i] = float32(r.NormFloat64() * 4)
	}
	copy(g, []float32{-200, -90, -87.5, -30, 0, 30, 87.5, 90, 200})
	for _, on := range []bool{true, false} {
		prev := SetSIMD(on)
		out := make([]float32, n)
		SwiGLU(out, g, u)
		for i := range g {
			x := float64(g[i])
			want := x * float64(u[i]) / (1 + math.Exp(-x))
			if math.Abs(float64(out[i])-want) > 1e-6*math.Abs(want)+1e-30 {
				t.Fatalf("simd=%v: SwiGLU(%v, %v) = %v, want %v", simd, g[i], u[i], out[i], want)
			}
		}
		SetSIMD(prev)
	}
}
