package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// refMXFP4 quantizes and dequantizes one group as MLX's fallback quantizer reads,
// written out with nothing shared with QuantizeMXFP4Row: the scale 2^round(log2(max/6)),
// then for each value the e2m1 value nearest to it over the scale, by a scan of the
// magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 with the sign put back (ties to the smaller
// magnitude, as MLX's argmin over its table keeps the first).
func refMXFP4(vals []float64) []float64 {
	amax := 0.0
	for _, v := range vals {
		amax = math.Max(amax, math.Abs(v))
	}
	e := 0.0
	if s := float64(float32(amax) / 6); s != 0 {
		e = math.RoundToEven(math.Log2(s))
	}
	p := math.Pow(2, e)
	mags := []float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	out := make([]float64, len(vals))
	for i, v := range vals {
		x := float64(float32(v) / float32(p))
		best := 0.0
		for _, m := range mags {
			if math.Abs(math.Abs(x)-m) < math.Abs(math.Abs(x)-best) {
				best = m
			}
		}
		if x < 0 && best != 0 {
			best = -best
		}
		out[i] = best * p
	}
	return out
}

// TestMXFP4 quantizes random rows (and rows with zero groups and exact ties), checks the
// decoded values against refMXFP4, and DotMXFP4Row against a float64 dot product with
// the decoded row.
func TestMXFP4(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	const cols = 256
	for trial := 0; trial < 200; trial++ {
		src := make([]float32, cols)
		scale := math.Pow(2, float64(r.IntN(20)-10))
		for i := range src {
			src[i] = float32(r.NormFloat64() * scale)
		}
		if trial%7 == 0 {
			clear(src[32:64]) // a group of zeros
		}
		if trial%5 == 0 { // ties: max 6 (scale 1) and values halfway between codes
			copy(src[64:72], []float32{6, 0.25, -0.25, 1.25, 2.5, -3.5, 5, 0.75})
		}
		packed := make([]uint32, cols/8)
		sc := make([]uint8, cols/32)
		QuantizeMXFP4Row(packed, sc, src)
		decScales, _ := FPScales(MXFP4, sc)
		got := make([]float32, cols)
		DequantizeFPRow(got, packed, decScales, 4, 32)
		for g := 0; g < cols/32; g++ {
			vals := make([]float64, 32)
			for i := range vals {
				vals[i] = float64(src[g*32+i])
			}
			want := refMXFP4(vals)
			for i, w := range want {
				if float64(got[g*32+i]) != w {
					t.Fatalf("trial %d, group %d, value %d (%v): decoded %v, want %v", trial, g, i, src[g*32+i], got[g*32+i], w)
				}
			}
		}
		x := make([]float32, cols)
		var ref, mag float64
		for i := range x {
			x[i] = float32(r.NormFloat64())
			ref += float64(x[i]) * float64(got[i])
			mag += math.Abs(float64(x[i]) * float64(got[i]))
		}
		if d := DotMXFP4Row(x, packed, decScales); math.Abs(float64(d)-ref) > 1e-6*mag {
			t.Fatalf("trial %d: DotMXFP4Row %v, float64 %v", trial, d, ref)
		}
	}
}
