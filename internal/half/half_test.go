package half

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// Every fp16 value must survive F16 -> F32 -> F16 unchanged (NaNs stay NaNs).
func TestF16RoundTripAll(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := F16ToF32(h)
		if f != f {
			if g := F32ToF16(f); g&0x7c00 != 0x7c00 || g&0x3ff == 0 {
				t.Fatalf("NaN %#04x -> %#04x", h, g)
			}
			continue
		}
		if g := F32ToF16(f); g != h {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, g)
		}
	}
}

// f16Value computes an fp16 value's exact magnitude independently, from the bit fields.
func f16Value(h uint16) float64 {
	exp := int(h>>10) & 0x1f
	mant := float64(h & 0x3ff)
	v := 0.0
	if exp == 0 {
		v = mant * math.Pow(2, -24)
	} else {
		v = (1 + mant/1024) * math.Pow(2, float64(exp-15))
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

func TestF16WidenMatchesFormula(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		if h&0x7c00 == 0x7c00 {
			continue
		}
		if got, want := float64(F16ToF32(h)), f16Value(h); got != want {
			t.Fatalf("%#04x: got %v want %v", h, got, want)
		}
	}
}

// Narrowing random float32s must pick the nearest fp16 (ties to even), checked with exact arithmetic.
func TestF32ToF16Nearest(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		f := float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(40)-25)))
		h := F32ToF16(f)
		if math.Abs(float64(f)) >= 65520 {
			if h&0x7fff != 0x7c00 {
				t.Fatalf("%v should overflow to inf, got %#04x", f, h)
			}
			continue
		}
		x := new(big.Float).SetFloat64(float64(f))
		d := func(c uint16) *big.Float {
			return new(big.Float).Abs(new(big.Float).Sub(x, new(big.Float).SetFloat64(f16Value(c))))
		}
		got := d(h)
		for _, c := range []uint16{h - 1, h + 1} {
			if c&0x7c00 == 0x7c00 {
				continue
			}
			cmp := d(c).Cmp(got)
			if cmp < 0 || (cmp == 0 && c&1 == 0) {
				t.Fatalf("%v -> %#04x (%v), but %#04x (%v) is nearer or an even tie", f, h, f16Value(h), c, f16Value(c))
			}
		}
	}
}

func TestBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 100000; i++ {
		f := float32(r.NormFloat64() * 1000)
		h := F32ToBF16(f)
		g := BF16ToF32(h)
		if F32ToBF16(g) != h {
			t.Fatalf("bf16 round trip of %#04x", h)
		}
		// nearest: the neighbours are not closer
		for _, c := range []uint16{h - 1, h + 1} {
			if math.Abs(float64(BF16ToF32(c)-f)) < math.Abs(float64(g-f)) {
				t.Fatalf("%v -> %v but %v is nearer", f, g, BF16ToF32(c))
			}
		}
	}
	if v := BF16ToF32(F32ToBF16(float32(math.NaN()))); v == v {
		t.Fatal("NaN lost")
	}
}

func TestSliceCodecs(t *testing.T) {
	src := []float32{1.5, -2.25, 0.099975586, 65504}
	b := make([]byte, 8)
	EncodeF16(b, src)
	dst := make([]float32, 4)
	DecodeF16(dst, b)
	for i := range src {
		if dst[i] != src[i] {
			t.Fatalf("f16 slice %d: %v != %v", i, dst[i], src[i])
		}
	}
	EncodeBF16(b, src[:2])
	DecodeBF16(dst[:2], b)
	if dst[0] != 1.5 || dst[1] != -2.25 {
		t.Fatalf("bf16 slice: %v", dst[:2])
	}
}
