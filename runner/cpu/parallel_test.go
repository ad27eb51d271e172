package cpu

import (
	"sync"
	"testing"
)

// TestParallel checks that parallel calls fn on disjoint ranges, each at least minChunk long
// unless the whole is shorter, that cover [0, n) exactly once.
func TestParallel(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		b := New(threads)
		for _, n := range []int{0, 1, 7, 31, 32, 33, 896, 4864, 151936} {
			for _, minChunk := range []int{0, 1, 4, 32, 1 << 14} {
				seen := make([]int32, n)
				var mu sync.Mutex
				short := 0
				b.parallel(n, minChunk, func(lo, hi int) {
					mu.Lock()
					defer mu.Unlock()
					if hi-lo < minChunk {
						short++
					}
					for i := lo; i < hi; i++ {
						seen[i]++
					}
				})
				for i, c := range seen {
					if c != 1 {
						t.Fatalf("threads %d, n %d, minChunk %d: index %d covered %d times", threads, n, minChunk, i, c)
					}
				}
				if short > 0 && n >= minChunk {
					t.Fatalf("threads %d, n %d, minChunk %d: %d ranges shorter than minChunk", threads, n, minChunk, short)
				}
			}
		}
	}
}
