package metal

import "github.com/mlxg/mlxg/runner/compute"

// ConcatRows implements compute.BatchContext: the rows of a batched pass's sequences
// (runner/model.Batch) joined one under the other.
func (c *context) ConcatRows(xs ...compute.Tensor) compute.Tensor {
	a, ok := c.args(xs...)
	if !ok || len(a) == 0 {
		return c.fail("ConcatRows of no tensors")
	}
	rows, err := compute.ConcatShape(dims(a), true)
	if err != nil {
		return c.fail("%v", err)
	}
	if len(a) == 1 {
		return xs[0]
	}
	return c.record(rows, a[0].cols, func(g *graph) mlxArray {
		arrs := make([]mlxArray, len(a))
		for i, t := range a {
			arrs[i] = t.arr
		}
		return g.concat(0, arrs...)
	})
}

// Segments implements compute.BatchContext. It is a no-op: MLX's products are held to a
// tolerance (1e-4 relative batched against alone, TestBatchedMatchesAlone), not to the
// CPU backend's identical sums, so every row of a batch goes through one product.
func (c *context) Segments([]int) {}

// dims is each tensor's [rows, cols], for compute's shape checks.
func dims(ts []*tensor) [][2]int {
	out := make([][2]int, len(ts))
	for i, t := range ts {
		out[i] = [2]int{t.rows, t.cols}
	}
	return out
}
