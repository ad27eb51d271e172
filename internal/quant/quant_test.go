package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

func randMatrix(r *rand.Rand, n int) []float32 {
	w := make([]float32, n)
	for i := range w {
		w[i] = float32(r.NormFloat64()) * 0.05
	}
	return w
}

// TestRoundTrip: for every bits×group, dequantized values lie within half a step of the
// originals (a full step where MLX's exact-edge scale makes the far end clamp), and
// Codes agrees with Code.
func TestRoundTrip(t *testing.T) {
	for _, on := range []bool{true, false} { // DequantizeRow has a 4-bit assembly kernel
		prev := SetSIMD(on)
		testRoundTrip(t)
		SetSIMD(prev)
	}
}

func testRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, group := range []int{32, 64, 128} {
			rows, cols := 5, 384
			w := randMatrix(r, rows*cols)
			packed, scales, biases, err := Quantize(w, rows, cols, bits, group)
			if err != nil {
				t.Fatal(err)
			}
			if len(packed) != rows*cols*bits/32 || len(scales) != rows*cols/group {
				t.Fatalf("bits %d group %d: sizes %d %d", bits, group, len(packed), len(scales))
			}
			d, err := Dequantize(packed, scales, biases, rows, cols, bits, group)
			if err != nil {
				t.Fatal(err)
			}
			wpr := Words(cols, bits)
			for i := range w {
				s := math.Abs(float64(scales[i/group]))
				q := Code(packed[i/cols*wpr:], i%cols, bits)
				limit := s * 0.5001
				if q == 0 || q == 1<<bits-1 {
					limit = s * 1.0001
				}
				if e := math.Abs(float64(d[i] - w[i])); e > limit+1e-7 {
					t.Fatalf("bits %d group %d: element %d (code %d): %v -> %v, error %v > %v", bits, group, i, q, w[i], d[i], e, limit)
				}
			}
			// Codes and Code agree with each other.
			row := packed[:Words(cols, bits)]
			c := make([]float32, cols)
			Codes(c, row, 0, bits)
			for i := range c {
				if uint32(c[i]) != Code(row, i, bits) || c[i] > float32(int(1)<<bits-1) {
					t.Fatalf("bits %d: code %d: Codes %v Code %d", bits, i, c[i], Code(row, i, bits))
				}
			}
		}
	}
}

// TestFormula checks MLX's scale/bias formula by hand on two groups.
func TestFormula(t *testing.T) {
	// min -1 has the larger magnitude: scale = 1.5/3 = 0.5, edge -1 -> q0 = -2,
	// scale = -1/-2 = 0.5, bias = -1; codes rint((w+1)/0.5).
	w := make([]float32, 32)
	for i := range w {
		w[i] = []float32{-1, -0.5, 0, 0.5}[i%4]
	}
	p, s, b, _ := Quantize(w, 1, 32, 2, 32)
	if s[0] != 0.5 || b[0] != -1 {
		t.Fatalf("scale %v bias %v, want 0.5 -1", s[0], b[0])
	}
	// codes 0,1,2,3 repeating: each 2-bit code k at bits 2k -> 0b11100100 per byte.
	if p[0] != 0xE4E4E4E4 || p[1] != 0xE4E4E4E4 {
		t.Fatalf("packed %08x %08x, want e4e4e4e4", p[0], p[1])
	}
	// max 1 has the larger magnitude: scale = -(1.5/3) = -0.5, edge 1, q0 = -2,
	// scale = -0.5, bias = 1: the scale is negative, as in MLX.
	for i := range w {
		w[i] = []float32{1, 0.5, 0, -0.5}[i%4]
	}
	p, s, b, _ = Quantize(w, 1, 32, 2, 32)
	if s[0] != -0.5 || b[0] != 1 || p[0] != 0xE4E4E4E4 {
		t.Fatalf("scale %v bias %v packed %08x, want -0.5 1 e4e4e4e4", s[0], b[0], p[0])
	}
	// A constant group: scale is eps-sized, q0 rounds to a huge value and the edge is
	// exact: everything dequantizes back to the constant.
	for i := range w {
		w[i] = 0.25
	}
	p, s, b, _ = Quantize(w, 1, 32, 4, 32)
	d, _ := Dequantize(p, s, b, 1, 32, 4, 32)
	for _, v := range d {
		if v != 0.25 {
			t.Fatalf("constant group dequantized to %v", v)
		}
	}
}

// extractMLX is MLX's extract_bits (mlx/backend/cpu/quantized.cpp) for 8 three- or
// five-bit codes or 4 six-bit codes read from bytes, written out independently of Codes.
func extractMLX(b []byte, bits int) []uint32 {
	u := func(i int) uint32 { return uint32(b[i]) }
	switch bits {
	case 3:
		return []uint32{u(0) & 7, (u(0) & 0x38) >> 3, (u(0)&0xc0)>>6 + (u(1)&1)<<2, (u(1) & 0xe) >> 1,
			(u(1) & 0x70) >> 4, (u(1)&0x80)>>7 + (u(2)&3)<<1, (u(2) & 0x1c) >> 2, (u(2) & 0xe0) >> 5}
	case 5:
		return []uint32{u(0) & 0x1f, (u(0)&0xe0)>>5 + (u(1)&3)<<3, (u(1) & 0x7c) >> 2, (u(1)&0x80)>>7 + (u(2)&0xf)<<1,
			(u(2)&0xf0)>>4 + (u(3)&1)<<4, (u(3) & 0x3e) >> 1, (u(3)&0xc0)>>6 + (u(4)&7)<<2, (u(4) & 0xf8) >> 3}
	case 6:
		return []uint32{u(0) & 0x3f, (u(0)>>6)&3 + (u(1)&0xf)<<2, (u(1)>>4)&0xf + (u(2)&3)<<4, (u(2) >> 2) & 0x3f}
	}
	panic("bits")
}

// TestOddBitsLayout checks 3-, 5- and 6-bit packing against MLX's byte-level extractor.
func TestOddBitsLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, bits := range []int{3, 5, 6} {
		w := randMatrix(r, 128)
		p, _, _, _ := Quantize(w, 1, 128, bits, 32)
		bytes := make([]byte, 4*len(p))
		for i, x := range p {
			bytes[4*i], bytes[4*i+1], bytes[4*i+2], bytes[4*i+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
		}
		per, nb := 8, bits // 8 codes in `bits` bytes, except 6-bit: 4 codes in 3 bytes
		if bits == 6 {
			per, nb = 4, 3
		}
		for k := 0; k*per < 128; k++ {
			want := extractMLX(bytes[k*nb:], bits)
			for j, c := range want {
				if got := Code(p, k*per+j, bits); got != c {
					t.Fatalf("%d-bit code %d: got %d, MLX layout says %d", bits, k*per+j, got, c)
				}
			}
		}
	}
	// A hand-packed 3-bit run: codes 1..7,0 -> bytes d1 58 1f.
	var p [3]uint32
	for i, c := range []uint32{1, 2, 3, 4, 5, 6, 7, 0} {
		putCode(p[:], i, 3, c)
	}
	if p[0] != 0x001f58d1 {
		t.Fatalf("3-bit codes 1..7,0 packed as %08x, want 001f58d1", p[0])
	}
}

// TestDotRow compares DotRow with a dot product against the dequantized row.
func TestDotRow(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, group := range []int{32, 64, 128} {
			cols := 256
			w := randMatrix(r, cols)
			x := randMatrix(r, cols)
			p, s, b, _ := Quantize(w, 1, cols, bits, group)
			d, _ := Dequantize(p, s, b, 1, cols, bits, group)
			var want float64
			for i := range x {
				want += float64(x[i]) * float64(d[i])
			}
			xs := make([]float32, cols/group)
			GroupSums(xs, x, group)
			got := DotRow(x, xs, p, s, b, bits, group)
			if math.Abs(float64(got)-want) > 1e-5+1e-4*math.Abs(want) {
				t.Fatalf("bits %d group %d: DotRow %v, reference %v", bits, group, got, want)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	if _, _, _, err := Quantize(make([]float32, 64), 1, 64, 7, 64); err == nil {
		t.Fatal("7 bits accepted")
	}
	if _, _, _, err := Quantize(make([]float32, 64), 1, 64, 4, 48); err == nil {
		t.Fatal("group 48 accepted")
	}
	if _, _, _, err := Quantize(make([]float32, 96), 1, 96, 4, 64); err == nil {
		t.Fatal("96 columns in groups of 64 accepted")
	}
	if _, _, _, err := Quantize(make([]float32, 63), 1, 64, 4, 64); err == nil {
		t.Fatal("short input accepted")
	}
	if _, err := Dequantize(make([]uint32, 7), make([]float32, 1), make([]float32, 1), 1, 64, 4, 64); err == nil {
		t.Fatal("short packed accepted")
	}
}

func TestFP(t *testing.T) {
	// e4m3: 0x38 = exponent 7, mantissa 0 = 1.0; 0x7e = 448 (max); 0x01 = 2^-9 (subnormal); 0xc0 = -2.
	for c, want := range map[uint8]float32{0x38: 1, 0x7e: 448, 0x01: 1.0 / 512, 0xc0: -2, 0x3c: 1.5} {
		if got := E4M3(c); got != want {
			t.Errorf("E4M3(%#x) = %v, want %v", c, got, want)
		}
	}
	for c, want := range map[uint8]float32{127: 1, 128: 2, 120: 1.0 / 128} {
		if got := E8M0(c); got != want {
			t.Errorf("E8M0(%d) = %v, want %v", c, got, want)
		}
	}
	// mxfp4 row of 32: codes k%16 (nibbles LSB first) with scale byte 128 (=2).
	packed := make([]uint32, 4)
	for i := 0; i < 32; i++ {
		putCode(packed, i, 4, uint32(i%16))
	}
	d, err := DequantizeFP(MXFP4, packed, []uint8{128}, 1, 32)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range d {
		if v != 2*fp4[i%16] {
			t.Fatalf("mxfp4 element %d = %v, want %v", i, v, 2*fp4[i%16])
		}
	}
	// mxfp8: bytes LSB first, e4m3 codes, scale 2^-1.
	r := rand.New(rand.NewPCG(7, 8))
	packed = make([]uint32, 8)
	codes := make([]uint8, 32)
	for i := range codes {
		codes[i] = uint8(r.IntN(256))
		if codes[i]&127 == 127 { // NaN codes aside
			codes[i] = 1
		}
		putCode(packed, i, 8, uint32(codes[i]))
	}
	d, _ = DequantizeFP(MXFP8, packed, []uint8{126}, 1, 32)
	for i, v := range d {
		if v != E4M3(codes[i])/2 {
			t.Fatalf("mxfp8 element %d = %v, want %v", i, v, E4M3(codes[i])/2)
		}
	}
	if _, err := DequantizeFP(NVFP4, packed, []uint8{1}, 1, 32); err == nil {
		t.Fatal("nvfp4 with one scale for 32 values accepted")
	}
}

// TestDequantizeRowKernel compares the 4-bit assembly DequantizeRow with the plain one
// (equal up to the fused multiply-add's single rounding).
func TestDequantizeRowKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 12))
	for _, group := range []int{32, 64, 128} {
		w := randMatrix(r, 512)
		p, s, b, _ := Quantize(w, 1, 512, 4, group)
		fast, plain := make([]float32, 512), make([]float32, 512)
		prev := SetSIMD(true)
		DequantizeRow(fast, p, s, b, 4, group)
		SetSIMD(false)
		DequantizeRow(plain, p, s, b, 4, group)
		SetSIMD(prev)
		for i := range plain {
			g := i / group // an ulp or two of the terms, which may cancel
			tol := 2.4e-7 * (15*math.Abs(float64(s[g])) + math.Abs(float64(b[g])))
			if math.Abs(float64(fast[i]-plain[i])) > tol {
				t.Fatalf("group %d: element %d = %v, plain kernel %v", group, i, fast[i], plain[i])
			}
		}
	}
}
