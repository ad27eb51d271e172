package kvstore

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestSoftmaxExp: SoftmaxExp's weights and sum are math.Exp's to float32 rounding, over rows of odd
// lengths (the SIMD runs and the tail).
func TestSoftmaxExp(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 7, 8, 9, 63, 3072, 3077} {
		sc := make([]float32, n)
		mx := float32(math.Inf(-1))
		for i := range sc {
			sc[i] = float32(r.NormFloat64() * 6)
			mx = max(mx, sc[i])
		}
		want := make([]float64, n)
		var wantSum float64
		for i, v := range sc {
			want[i] = math.Exp(float64(v - mx))
			wantSum += want[i]
		}
		sum := SoftmaxExp(sc, mx)
		if math.Abs(float64(sum)-wantSum) > 1e-5*wantSum {
			t.Errorf("n=%d: sum %g, want %g", n, sum, wantSum)
		}
		for i := range sc {
			if math.Abs(float64(sc[i])-want[i]) > 4e-7*max(want[i], 1e-30)+1e-38 {
				t.Fatalf("n=%d: e^%g = %g, want %g", n, want[i], sc[i], want[i])
			}
		}
	}
}

// BenchmarkSoftmaxExp: a row of 3,072 scores (a 1024×768 image's patches at Qwen3.5's 16-pixel
// patches, one query of the vision tower's attention) through SoftmaxExp against the float64 math.Exp
// loop it replaced, in the same run; it reports the median of each over the iterations and their ratio.
func BenchmarkSoftmaxExp(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	src := make([]float32, 3072)
	for i := range src {
		src[i] = float32(r.NormFloat64() * 4)
	}
	mx := slices.Max(src)
	row := make([]float32, len(src))
	const reps = 200
	var fast, plain []float64
	for range b.N {
		start := time.Now()
		for range reps {
			copy(row, src)
			_ = SoftmaxExp(row, mx)
		}
		fast = append(fast, float64(time.Since(start))/reps)
		start = time.Now()
		for range reps {
			copy(row, src)
			var sum float64
			for j, v := range row {
				p := math.Exp(float64(v - mx))
				row[j] = float32(p)
				sum += p
			}
			_ = sum
		}
		plain = append(plain, float64(time.Since(start))/reps)
	}
	med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	f, p := med(fast), med(plain)
	b.ReportMetric(f, "softmaxexp-ns/row")
	b.ReportMetric(p, "mathexp-ns/row")
	b.ReportMetric(p/f, "speedup")
	b.ReportMetric(0, "ns/op")
}
