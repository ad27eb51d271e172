package kvstore

import (
	"math/rand/v2"
	"testing"
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
