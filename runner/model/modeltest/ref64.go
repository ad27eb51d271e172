package modeltest

import (
	"math"

	"github.com/mlxg/mlxg/runner/model"
)

// The pieces of the plain float64 references of a language model fed images (Gemma 3's
// and Gemma 4's lmRef), written as the modules state them, for tests to compare every
// row's logits against.

// Rows64 is a prompt's input rows in float64: an image row its features, a text row its
// token's embedding (embed: vocabulary × hidden, row-major) times scale; and the image each
// row belongs to (its span's start, -1 for text), which an image mask groups rows by.
func Rows64(ids []int32, md *model.Media, embed []float64, hidden int, scale float64) (x [][]float64, group []int) {
	x, group = make([][]float64, len(ids)), make([]int, len(ids))
	for i, id := range ids {
		group[i] = -1
		x[i] = make([]float64, hidden)
		if s, k, ok := md.At(i); ok {
			for e := range hidden {
				x[i][e] = float64(s.Rows[k*hidden+e])
			}
			group[i] = s.Start
			continue
		}
		for e := range hidden {
			x[i][e] = embed[int(id)*hidden+e] * scale
		}
	}
	return x, group
}

// Mat64 is w·in for a weight w of o rows of len(in) (row-major, as checkpoints store a
// linear's weight).
func Mat64(in, w []float64, o int) []float64 {
	out := make([]float64, o)
	for j := range o {
		var s float64
		for i, a := range in {
			s += w[j*len(in)+i] * a
		}
		out[j] = s
	}
	return out
}

// Attention64 is each row's attention output (nh heads of hd values): per head, the softmax
// of q·k/div over the keys row i sees (sees(i, j)) times their values; query head h reads
// KV head h/(nh/nkv).
func Attention64(q, k, v [][]float64, nh, nkv, hd int, div float64, sees func(i, j int) bool) [][]float64 {
	T := len(q)
	out := make([][]float64, T)
	for i := range T {
		att := make([]float64, nh*hd)
		for h := range nh {
			g := h / (nh / nkv)
			sc := make([]float64, T)
			mx := math.Inf(-1)
			for j := range T {
				if !sees(i, j) {
					continue
				}
				var d float64
				for e := range hd {
					d += q[i][h*hd+e] * k[j][g*hd+e]
				}
				sc[j] = d / div
				mx = max(mx, sc[j])
			}
			var z float64
			for j := range T {
				if sees(i, j) {
					sc[j] = math.Exp(sc[j] - mx)
					z += sc[j]
				}
			}
			for j := range T {
				if sees(i, j) {
					for e := range hd {
						att[h*hd+e] += sc[j] / z * v[j][g*hd+e]
					}
				}
			}
		}
		out[i] = att
	}
	return out
}
