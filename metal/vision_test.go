package metal

import (
	"math/rand/v2"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
)

// TestSpanView: the interval spanView gives each query row is exactly the set of
// positions the row sees by the definition (its causal, windowed view, and every
// position of a span it is in), for random spans, windows and passes, prefix hits
// inside an image among them.
func TestSpanView(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 2000 {
		end := 1 + r.IntN(40)
		T := 1 + r.IntN(end)
		first := end - T
		window := 0
		if r.IntN(2) == 0 {
			window = 1 + r.IntN(8)
		}
		var spans []kvstore.Span
		for p := r.IntN(4); p < end; {
			e := p + 1 + r.IntN(6)
			if e > end {
				break
			}
			spans = append(spans, kvstore.Span{Start: p, End: e})
			p = e + r.IntN(4)
		}
		lo, last, err := spanView(first, T, window, spans)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		for row := range T {
			p := first + row
			for j := range end {
				want := j <= p && (window == 0 || j > p-window)
				for _, s := range spans {
					if p >= s.Start && p < s.End && j >= s.Start && j < s.End {
						want = true
					}
				}
				if got := j >= int(lo[row]) && j <= int(last[row]); got != want {
					t.Fatalf("trial %d (first %d, T %d, window %d, spans %v): row at %d sees %d: %v, want %v (interval %d..%d)",
						trial, first, T, window, spans, p, j, got, want, lo[row], last[row])
				}
			}
		}
	}
}

// TestSpanViewRefusesBadSpans: spans out of order, overlapping, empty or ending past the
// positions attended are an error, not a wrong mask.
func TestSpanViewRefusesBadSpans(t *testing.T) {
	for _, spans := range [][]kvstore.Span{
		{{Start: 3, End: 5}, {Start: 1, End: 2}},
		{{Start: 1, End: 4}, {Start: 3, End: 6}},
		{{Start: 2, End: 2}},
		{{Start: 4, End: 11}},
	} {
		if _, _, err := spanView(5, 5, 0, spans); err == nil {
			t.Errorf("spans %v over positions 5..9 were accepted", spans)
		}
	}
}
