package quant

import "math"

// Float kernels shared by the CPU backend's matrix products and the KV cache's
// attention loops: dot products of one or two vectors with four rows at a time, and
// the matching weighted sum of four rows (with Dot and Axpy, in plain Go, for the
// rows left over). AVX2+FMA assembly on amd64, plain Go
// elsewhere, with identical results up to float32 rounding.

// Dot is a · b over len(a) values, in four partial sums (which lets the loop run
// without waiting on one sum's previous addition), added pairwise at the end.
func Dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// Axpy is y += a·x over len(y) values.
func Axpy(y, x []float32, a float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// DotRows4 sets out[k] = x · w[k*stride : k*stride+len(x)] for k = 0..3.
func DotRows4(out *[4]float32, x, w []float32, stride int) {
	n := len(x)
	if n == 0 {
		*out = [4]float32{}
		return
	}
	_ = w[3*stride+n-1] // every row in range
	n8 := n &^ 7
	if simd && n8 > 0 {
		dot4x8(&x[0], &w[0], stride, n8, out)
	} else {
		n8 = 0
		*out = [4]float32{}
	}
	for k := range out {
		row := w[k*stride+n8 : k*stride+n]
		for i, v := range x[n8:] {
			out[k] += v * row[i]
		}
	}
}

// DotRows4x2 is DotRows4 for two vectors of the same length: out[k] = x0·w_k and
// out[4+k] = x1·w_k.
func DotRows4x2(out *[8]float32, x0, x1, w []float32, stride int) {
	n := len(x0)
	if n == 0 {
		*out = [8]float32{}
		return
	}
	_, _ = x1[n-1], w[3*stride+n-1]
	n8 := n &^ 7
	if simd && n8 > 0 {
		dot4x8x2(&x0[0], &x1[0], &w[0], stride, n8, out)
	} else {
		var a, b [4]float32
		DotRows4(&a, x0, w, stride)
		DotRows4(&b, x1[:n], w, stride)
		copy(out[:4], a[:])
		copy(out[4:], b[:])
		return
	}
	for k := 0; k < 4; k++ {
		row := w[k*stride+n8 : k*stride+n]
		for i := range row {
			out[k] += x0[n8+i] * row[i]
			out[4+k] += x1[n8+i] * row[i]
		}
	}
}

// AxpyRows4 adds p[0]·w_0 + p[1]·w_1 + p[2]·w_2 + p[3]·w_3 to y, where
// w_k = w[k*stride : k*stride+len(y)].
func AxpyRows4(y, w []float32, stride int, p *[4]float32) {
	n := len(y)
	if n == 0 {
		return
	}
	_ = w[3*stride+n-1]
	n8 := n &^ 7
	if simd && n8 > 0 {
		axpy4x8(&y[0], &w[0], stride, n8, p)
	} else {
		n8 = 0
	}
	w0, w1, w2, w3 := w[n8:n], w[stride+n8:stride+n], w[2*stride+n8:2*stride+n], w[3*stride+n8:3*stride+n]
	for i := range y[n8:] {
		y[n8+i] += p[0]*w0[i] + p[1]*w1[i] + p[2]*w2[i] + p[3]*w3[i]
	}
}

// WidenF16 converts fp16 values to float32 (len(src) values into dst), exactly.
func WidenF16(dst []float32, src []uint16) {
	n := len(src)
	if n == 0 {
		return
	}
	dst = dst[:n]
	n8 := n &^ 7
	if simd && n8 > 0 {
		widen8(&dst[0], &src[0], n8)
	} else {
		n8 = 0
	}
	for i, h := range src[n8:] {
		if e := h & 0x7c00; e != 0 && e != 0x7c00 { // normal: move and rebias the exponent
			dst[n8+i] = math.Float32frombits(uint32(h&0x8000)<<16 | (uint32(h&0x7fff)<<13 + 0x38000000))
		} else {
			dst[n8+i] = f16(h) // zero, subnormal, inf, NaN
		}
	}
}

// SwiGLU writes silu(g)·u = g·u / (1 + e^-g) into out (len(g) values), with e^x to
// about 2 ulp.
func SwiGLU(out, g, u []float32) {
	n := len(g)
	if n == 0 {
		return
	}
	out, u = out[:n], u[:n]
	n8 := n &^ 7
	if simd && n8 > 0 {
		swiglu8(&out[0], &g[0], &u[0], n8)
	} else {
		n8 = 0
	}
	for i := n8; i < n; i++ {
		out[i] = g[i] * u[i] / (1 + exp32(-g[i]))
	}
}

// exp32 is e^x in float32 to about 2 ulp, saturating outside float32's range: x =
// k·ln2 + r with |r| <= ln2/2, e^r by its degree-7 Taylor polynomial, times 2^k.
func exp32(x float32) float32 {
	switch {
	case x > 88.7:
		return float32(math.Inf(1))
	case x < -87:
		return 0
	case x != x:
		return x
	}
	const ln2Hi, ln2Lo = 0.693145751953125, 1.428606765330187e-06
	k := float32(math.RoundToEven(float64(x * 1.442695041)))
	r := (x - k*ln2Hi) - k*ln2Lo
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040)))))))
	if k > 127 { // 2^128 itself overflows: scale in two steps
		return p * 2 * math.Float32frombits(uint32(int32(k)-1+127)<<23)
	}
	return p * math.Float32frombits(uint32(int32(k)+127)<<23)
}
