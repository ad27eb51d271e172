package kvstore

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMM6x16: the assembly kernel against the plain one on random operands, with and
// without accumulation, strides wider than the operands, lengths 1 to 300, one to three
// panels.
func TestMM6x16(t *testing.T) {
	if !prefillSIMD {
		t.Skip("no assembly kernel on this CPU")
	}
	r := rand.New(rand.NewPCG(61, 61))
	for _, n := range []int{1, 7, 16, 64, 300} {
		for _, acc := range []bool{false, true} {
			for panels := 1; panels <= 3; panels++ {
				as, bs, cs := n+3, 16+5, 16*panels+9
				bnext, cnext := n*bs+7, 16+2
				a, b := randVec(r, 6*as), randVec(r, panels*bnext)
				c0 := randVec(r, 6*cs+panels*cnext)
				got, want := append([]float32(nil), c0...), append([]float32(nil), c0...)
				mm6x16(&a[0], as, &b[0], bs, n, &got[0], cs, acc, panels, bnext, cnext)
				for p := 0; p < panels; p++ {
					mm6x16Ref(a, as, b[p*bnext:], bs, n, want[p*cnext:], cs, acc)
				}
				for i := range want {
					if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
						t.Fatalf("n=%d acc=%v panels=%d: c[%d] = %v, plain kernel %v", n, acc, panels, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestBlockedAttend: prefill attention through the blocked products (assembly and plain
// kernel) against float64 attention and the tile path, over float32, fp16 and quantized
// (K8/V4) caches: chunks that start mid-block and cross blocks, group sizes 1, 3 and 7
// (query vectors not a multiple of 6), one and three threads.
func TestBlockedAttend(t *testing.T) {
	r := rand.New(rand.NewPCG(62, 62))
	prevB, prevS := blockedAttention, prefillSIMD
	defer func() { blockedAttention, prefillSIMD = prevB, prevS }()
	type shape struct{ kvHeads, heads, kDim, vDim int }
	for _, sh := range []shape{{2, 6, 32, 16}, {1, 7, 64, 64}, {2, 2, 40, 32}} {
		for _, kind := range []string{"fp32", "fp16", "q8/4"} {
			for _, threads := range []int{1, 3} {
				var c interface {
					Layer
					tiler
				}
				var err error
				switch kind {
				case "fp32", "fp16":
					c, err = NewFull(sh.kvHeads, sh.kDim, sh.vDim, kind == "fp32")
				default:
					if sh.kDim%32 != 0 || sh.vDim%32 != 0 {
						continue
					}
					c, err = NewQuantized(sh.kvHeads, sh.kDim, sh.vDim, Spec{K: AffineFormat(8, 32), V: AffineFormat(4, 32)}, 0)
				}
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range []int{37, 300, 5, 200} {
					k, v := randVec(r, n*sh.kvHeads*sh.kDim), randVec(r, n*sh.kvHeads*sh.vDim)
					if err := c.Append(k, v, n); err != nil {
						t.Fatal(err)
					}
					length := c.Len()
					allK, allV := stored(c, length)
					q := randVec(r, n*sh.heads*sh.kDim)
					scale := float32(1 / math.Sqrt(float64(sh.kDim)))
					want := refAttention(q, allK, allV, n, length, sh.heads, sh.kvHeads, sh.kDim, sh.vDim, float64(scale))
					for _, mode := range []struct{ blocked, simd bool }{{true, true}, {true, false}, {false, prevS}} {
						blockedAttention, prefillSIMD = mode.blocked, mode.simd && prevS
						out := make([]float32, n*sh.heads*sh.vDim)
						if err := c.Attend(Attention{Q: q, Out: out, N: n, Heads: sh.heads, Scale: scale, Threads: threads}); err != nil {
							t.Fatal(err)
						}
						for i := range want {
							if math.Abs(float64(out[i]-want[i])) > 2e-5 {
								t.Fatalf("%v %s threads=%d len=%d mode %v: element %d = %v, reference %v", sh, kind, threads, length, mode, i, out[i], want[i])
							}
						}
					}
				}
			}
		}
	}
}

// stored reads back the first length positions of a cache as positions × kvHeads × dim.
func stored(c tiler, length int) (k, v []float32) {
	kvHeads, kDim, vDim := c.Dims()
	k, v = make([]float32, length*kvHeads*kDim), make([]float32, length*kvHeads*vDim)
	kt, vt := make([]float32, kDim), make([]float32, vDim)
	for p := 0; p < length; p++ {
		for h := 0; h < kvHeads; h++ {
			c.tile(kt, vt, h, p, p+1)
			copy(k[(p*kvHeads+h)*kDim:], kt)
			copy(v[(p*kvHeads+h)*vDim:], vt)
		}
	}
	return k, v
}
