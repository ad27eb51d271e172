package kvstore

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxg/mlxg/internal/half"
)

func randVec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// refAttention is plain causal GQA attention in float64 over all keys and values
// (positions × kvHeads × dim), for the last n of length positions.
func refAttention(q, k, v []float32, n, length, heads, kvHeads, kDim, vDim int, scale float64) []float32 {
	out := make([]float32, n*heads*vDim)
	group := heads / kvHeads
	for i := 0; i < n; i++ {
		pos := length - n + i
		for h := 0; h < heads; h++ {
			kh := h / group
			qv := q[(i*heads+h)*kDim:][:kDim]
			w := make([]float64, pos+1)
			mx := math.Inf(-1)
			for j := 0; j <= pos; j++ {
				var s float64
				for d := 0; d < kDim; d++ {
					s += float64(qv[d]) * float64(k[(j*kvHeads+kh)*kDim+d])
				}
				w[j] = s * scale
				mx = math.Max(mx, w[j])
			}
			var sum float64
			for j := range w {
				w[j] = math.Exp(w[j] - mx)
				sum += w[j]
			}
			for d := 0; d < vDim; d++ {
				var o float64
				for j := range w {
					o += w[j] * float64(v[(j*kvHeads+kh)*vDim+d])
				}
				out[(i*heads+h)*vDim+d] = float32(o / sum)
			}
		}
	}
	return out
}

func TestFullAttend(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	const kvHeads, heads, kDim, vDim = 2, 6, 32, 16
	for _, fp32 := range []bool{true, false} {
		for _, threads := range []int{1, 3} {
			c, err := NewFull(kvHeads, kDim, vDim, fp32)
			if err != nil {
				t.Fatal(err)
			}
			var allK, allV []float32
			// A prefill that spans two blocks, one of a single row, then one that crosses
			// into a third block.
			for _, n := range []int{300, 1, 240} {
				k, v := randVec(r, n*kvHeads*kDim), randVec(r, n*kvHeads*vDim)
				if err := c.Append(k, v, n); err != nil {
					t.Fatal(err)
				}
				if !fp32 { // the reference sees what fp16 storage keeps
					for i := range k {
						k[i] = half.F16ToF32(half.F32ToF16(k[i]))
					}
					for i := range v {
						v[i] = half.F16ToF32(half.F32ToF16(v[i]))
					}
				}
				allK, allV = append(allK, k...), append(allV, v...)
				q := randVec(r, n*heads*kDim)
				out := make([]float32, n*heads*vDim)
				scale := float32(1 / math.Sqrt(kDim))
				if err := c.Attend(Attention{Q: q, Out: out, N: n, Heads: heads, Scale: scale, Threads: threads}); err != nil {
					t.Fatal(err)
				}
				want := refAttention(q, allK, allV, n, c.Len(), heads, kvHeads, kDim, vDim, float64(scale))
				for i := range want {
					if math.Abs(float64(out[i]-want[i])) > 2e-5 {
						t.Fatalf("fp32=%v threads=%d len=%d: element %d = %v, reference %v", fp32, threads, c.Len(), i, out[i], want[i])
					}
				}
			}
			if c.Len() != 541 {
				t.Fatalf("Len %d, want 541", c.Len())
			}
			size := int64(2)
			if fp32 {
				size = 4
			}
			if c.Bytes() != 541*kvHeads*(kDim+vDim)*size {
				t.Fatalf("Bytes %d", c.Bytes())
			}
		}
	}
}

// TestTruncate: after truncating and appending different positions, attention equals
// attention over the kept prefix plus the new positions.
func TestTruncate(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	const kvHeads, heads, dim = 1, 2, 32
	c, _ := NewFull(kvHeads, dim, dim, true)
	k, v := randVec(r, 400*dim), randVec(r, 400*dim)
	if err := c.Append(k, v, 400); err != nil {
		t.Fatal(err)
	}
	if err := c.Truncate(250); err != nil {
		t.Fatal(err)
	}
	k2, v2 := randVec(r, 20*dim), randVec(r, 20*dim)
	if err := c.Append(k2, v2, 20); err != nil {
		t.Fatal(err)
	}
	q := randVec(r, 20*heads*dim)
	out := make([]float32, 20*heads*dim)
	if err := c.Attend(Attention{Q: q, Out: out, N: 20, Heads: heads, Scale: 0.2, Threads: 2}); err != nil {
		t.Fatal(err)
	}
	want := refAttention(q, append(k[:250*dim:250*dim], k2...), append(v[:250*dim:250*dim], v2...), 20, 270, heads, kvHeads, dim, dim, 0.2)
	for i := range want {
		if math.Abs(float64(out[i]-want[i])) > 2e-5 {
			t.Fatalf("element %d = %v, reference %v", i, out[i], want[i])
		}
	}
	if err := c.Truncate(271); err == nil {
		t.Fatal("truncating past the end accepted")
	}
}

func TestAttendErrors(t *testing.T) {
	c, _ := NewFull(2, 8, 8, false)
	if err := c.Append(make([]float32, 15), make([]float32, 16), 1); err == nil {
		t.Fatal("short keys accepted")
	}
	_ = c.Append(make([]float32, 16), make([]float32, 16), 1)
	if err := c.Attend(Attention{Q: make([]float32, 24), Out: make([]float32, 24), N: 1, Heads: 3, Scale: 1}); err == nil {
		t.Fatal("3 query heads over 2 KV heads accepted")
	}
	if err := c.Attend(Attention{Q: make([]float32, 64), Out: make([]float32, 64), N: 2, Heads: 4, Scale: 1}); err == nil {
		t.Fatal("2 query rows over a cache of 1 accepted")
	}
	if _, err := NewFull(0, 8, 8, false); err == nil {
		t.Fatal("0 KV heads accepted")
	}
}

func TestExpNeg(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 100000; i++ {
		x := -float32(r.Float64() * 87) // below -87 the result (< 1.7e-38) is flushed to 0
		if i < 100 {
			x = -float32(i) * 1e-3
		}
		want := math.Exp(float64(x))
		if got := float64(expNeg(x)); math.Abs(got-want) > 3e-7*want+1e-38 {
			t.Fatalf("expNeg(%v) = %v, want %v", x, got, want)
		}
	}
	if expNeg(float32(math.Inf(-1))) != 0 {
		t.Fatal("expNeg(-Inf) != 0")
	}
}

// BenchmarkFullAttend: a 512-token prefill's attention for one Qwen2-0.5B-shaped layer
// (14 query heads over 2 KV heads of 64), on 2 threads.
func BenchmarkFullAttend(b *testing.B) {
	r := rand.New(rand.NewPCG(4, 4))
	const n, heads, kvHeads, hd = 512, 14, 2, 64
	k, v, q := randVec(r, n*kvHeads*hd), randVec(r, n*kvHeads*hd), randVec(r, n*heads*hd)
	out := make([]float32, n*heads*hd)
	for b.Loop() {
		c, _ := NewFull(kvHeads, hd, hd, false)
		c.Append(k, v, n)
		c.Attend(Attention{Q: q, Out: out, N: n, Heads: heads, Scale: 0.125, Threads: 2})
	}
}

// BenchmarkFullDecode: one decode step's attention over 4096 cached positions for one
// Qwen2-0.5B-shaped layer, fp16, on 2 threads.
func BenchmarkFullDecode(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 5))
	const n, heads, kvHeads, hd = 4096, 14, 2, 64
	c, _ := NewFull(kvHeads, hd, hd, false)
	c.Append(randVec(r, n*kvHeads*hd), randVec(r, n*kvHeads*hd), n)
	q, out := randVec(r, heads*hd), make([]float32, heads*hd)
	for b.Loop() {
		c.Attend(Attention{Q: q, Out: out, N: 1, Heads: heads, Scale: 0.125, Threads: 2})
	}
}

// TestSplitAttend: decode steps with more threads than KV heads split the cache's
// blocks between goroutines and merge their softmax states; the result must equal the
// reference.
func TestSplitAttend(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	const kvHeads, heads, dim = 2, 6, 32
	for _, fp32 := range []bool{true, false} {
		c, _ := NewFull(kvHeads, dim, dim, fp32)
		k, v := randVec(r, 1000*kvHeads*dim), randVec(r, 1000*kvHeads*dim)
		c.Append(k, v, 1000)
		k, v = make([]float32, len(k)), make([]float32, len(v))
		for p := 0; p < 1000; p++ { // the stored (fp16-rounded) keys and values
			for h := 0; h < kvHeads; h++ {
				kt, vt := make([]float32, dim), make([]float32, dim)
				c.tile(kt, vt, h, p, p+1)
				copy(k[(p*kvHeads+h)*dim:], kt)
				copy(v[(p*kvHeads+h)*dim:], vt)
			}
		}
		for _, n := range []int{1, 2, 3} {
			for _, threads := range []int{4, 8} {
				q := randVec(r, n*heads*dim)
				out := make([]float32, n*heads*dim)
				if err := c.Attend(Attention{Q: q, Out: out, N: n, Heads: heads, Scale: 0.3, Threads: threads}); err != nil {
					t.Fatal(err)
				}
				want := refAttention(q, k, v, n, 1000, heads, kvHeads, dim, dim, 0.3)
				for i := range want {
					if math.Abs(float64(out[i]-want[i])) > 2e-5 {
						t.Fatalf("fp32=%v n=%d threads=%d: element %d = %v, reference %v", fp32, n, threads, i, out[i], want[i])
					}
				}
			}
		}
	}
}
