package kvstore

import (
	"math/rand/v2"
	"testing"

	"github.com/mlxg/mlxg/internal/half"
	"github.com/mlxg/mlxg/internal/quant"
)

// TestDequantFastMatchesPlain: the SIMD dequantizers (where the CPU has them) give the
// plain Go path's values bit for bit, for every affine format and q4_0.
func TestDequantFastMatchesPlain(t *testing.T) {
	if !dequantSIMD {
		t.Skip("no SIMD dequantizer on this CPU: the plain path is the only one")
	}
	r := rand.New(rand.NewPCG(12, 12))
	for _, f := range allFormats {
		for _, dim := range []int{128, 256} {
			if f.Validate(dim) != nil {
				continue
			}
			c := newRowCodec(f, dim)
			s := c.newSeg(16)
			for i := 0; i < 16; i++ {
				x := randVec(r, dim)
				for j := range x {
					x[j] = x[j]*float32(i+1) - float32(i) // varied ranges and offsets
				}
				c.put(s, i, x)
			}
			fast, plain := make([]float32, dim), make([]float32, dim)
			for i := 0; i < 16; i++ {
				c.get(fast, s, i)
				dequantSIMD = false
				c.get(plain, s, i)
				dequantSIMD = true
				for j := range fast {
					if fast[j] != plain[j] {
						t.Fatalf("%v dim %d row %d element %d: SIMD %v, plain %v", f, dim, i, j, fast[j], plain[j])
					}
				}
			}
		}
	}
}

// TestDequant6MatchesCodes: the unrolled 6-bit decode gives the bit-stream decode's
// codes (quant.Codes) and the plain arithmetic's values bit for bit, for every 6-bit
// format and the head dims models use.
func TestDequant6MatchesCodes(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 13))
	tried := 0
	for _, f := range allFormats {
		if f.Mode != Affine || f.Bits != 6 {
			continue
		}
		for _, dim := range []int{32, 64, 96, 128, 256} {
			if f.Validate(dim) != nil {
				continue
			}
			tried++
			c := newRowCodec(f, dim)
			s := fillRows(r, c, 8)
			got, want := make([]float32, dim), make([]float32, dim)
			for i := 0; i < 8; i++ {
				codes, sb := s.codes[i*c.words:(i+1)*c.words], s.halfs[i*c.halfs:(i+1)*c.halfs]
				quant.Codes(want, codes, 0, 6)
				for j := range want {
					g := j / f.Group
					want[j] = half.F16ToF32(sb[2*g])*want[j] + half.F16ToF32(sb[2*g+1])
				}
				dequant6(got, codes, sb, f.Group)
				for j := range got {
					if got[j] != want[j] {
						t.Fatalf("%v dim %d row %d element %d: %v, want %v", f, dim, i, j, got[j], want[j])
					}
				}
			}
		}
	}
	if tried == 0 {
		t.Fatal("no 6-bit format tried")
	}
}

// fillRows encodes rows random rows of varied range and offset.
func fillRows(r *rand.Rand, c rowCodec, rows int) seg {
	s := c.newSeg(rows)
	for i := 0; i < rows; i++ {
		x := randVec(r, c.dim)
		for j := range x {
			x[j] = x[j]*float32(1+i%5) - float32(i%3)
		}
		c.put(s, i, x)
	}
	return s
}
