package runner

import (
	"fmt"
	"math"

	"github.com/mlxg/mlxg/kvstore"
)

// window32 is an exact reference sliding-window cache for tests: every position kept
// in float32, each query attending, in float64, to the window positions ending at its
// own (kvstore's Rotating keeps fp16).
type window32 struct {
	kvHeads, dim, window int
	k, v                 []float32
	n                    int
}

func (w *window32) Window() int           { return w.window }
func (w *window32) Dims() (int, int, int) { return w.kvHeads, w.dim, w.dim }
func (w *window32) Len() int              { return w.n }
func (w *window32) Bytes() int64          { return int64(len(w.k)+len(w.v)) * 4 }
func (w *window32) Truncate(n int) error {
	if n < 0 || n > w.n {
		return fmt.Errorf("window32: truncate %d of %d", n, w.n)
	}
	row := w.kvHeads * w.dim
	w.k, w.v, w.n = w.k[:n*row], w.v[:n*row], n
	return nil
}

func (w *window32) Append(k, v []float32, n int) error {
	if len(k) != n*w.kvHeads*w.dim || len(v) != len(k) {
		return fmt.Errorf("window32: append of %d positions with %d and %d values", n, len(k), len(v))
	}
	w.k, w.v, w.n = append(w.k, k...), append(w.v, v...), w.n+n
	return nil
}

func (w *window32) Attend(a kvstore.Attention) error {
	d, row, group := w.dim, w.kvHeads*w.dim, a.Heads/w.kvHeads
	for i := 0; i < a.N; i++ {
		p := w.n - a.N + i
		lo := max(0, p-w.window+1)
		for h := 0; h < a.Heads; h++ {
			q := a.Q[(i*a.Heads+h)*d:][:d]
			kh := h / group
			scores := make([]float64, p-lo+1)
			best := math.Inf(-1)
			for j := range scores {
				var s float64
				for x, qx := range q {
					s += float64(qx) * float64(w.k[(lo+j)*row+kh*d+x])
				}
				scores[j] = s * float64(a.Scale)
				best = max(best, scores[j])
			}
			var sum float64
			for j := range scores {
				scores[j] = math.Exp(scores[j] - best)
				sum += scores[j]
			}
			out := a.Out[(i*a.Heads+h)*d:][:d]
			for x := range out {
				var o float64
				for j, s := range scores {
					o += s * float64(w.v[(lo+j)*row+kh*d+x])
				}
				out[x] = float32(o / sum)
			}
		}
	}
	return nil
}
