package gemma4_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// normedHeads is rows × heads·hd values as Gemma 4's per-head norms leave them: each
// head's values of unit RMS times w (one weight per head column; nil: none, the value
// norm).
func normedHeads(r *rand.Rand, rows, heads, hd int, w []float64) [][]float64 {
	out := make([][]float64, rows)
	for i := range out {
		out[i] = make([]float64, heads*hd)
		for h := range heads {
			x := out[i][h*hd : (h+1)*hd]
			var ms float64
			for e := range x {
				x[e] = r.NormFloat64()
				ms += x[e] * x[e]
			}
			inv := 1 / math.Sqrt(ms/float64(hd))
			for e := range x {
				x[e] *= inv
				if w != nil {
					x[e] *= w[e]
				}
			}
		}
	}
	return out
}

// TestScaleOneAttention: Gemma 4's attention regime on each backend (the CPU backend, and
// MLX where libmlxc is installed): queries and keys RMS-normed per head with norm weights
// of 1 ± 0.2, as the tiny checkpoints draw them, an attention scale of 1, so that q·k
// reaches 20 to 40 where other architectures' scaled logits stay near 5; over a float32
// cache filled in three passes, on a full layer and a sliding one, the layer's own
// Attention and a KV-shared layer's AttentionShared over the same cache. Every output
// must be within float32 rounding (1e-5 of the largest) of a float64 softmax. The
// kernels meet that, while the exact softmax itself turns an input difference of 1e-6
// into 3 to 6e-6 at these logits (about 1e-6 at 1/sqrt(head_dim)): that, compounded
// over the layers, is why the backends' Gemma 4 logits differ more than other models'.
func TestScaleOneAttention(t *testing.T) {
	t.Run("cpu", func(t *testing.T) { testScaleOneAttention(t, cpu.New(2)) })
	t.Run("mlx", func(t *testing.T) {
		if !mlxtest.Enabled() {
			t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)")
		}
		testScaleOneAttention(t, mlxtest.Backend(t))
	})
}

func testScaleOneAttention(t *testing.T, b compute.Backend) {
	const heads, kvHeads = 4, 2
	passes := []int{80, 16, 1}
	T := 97
	for _, layer := range []struct {
		name       string
		hd, window int
	}{{"full", 64, 0}, {"sliding", 32, 8}} {
		hd, window := layer.hd, layer.window
		r := rand.New(rand.NewPCG(uint64(hd), 4))
		norm := func() []float64 {
			w := make([]float64, hd)
			for e := range w {
				w[e] = 1 + 0.2*(2*r.Float64()-1)
			}
			return w
		}
		q, k := normedHeads(r, T, heads, hd, norm()), normedHeads(r, T, kvHeads, hd, norm())
		v := normedHeads(r, T, kvHeads, hd, nil)
		qShared := normedHeads(r, T, heads, hd, norm())
		sees := func(i, j int) bool { return j <= i && (window == 0 || i-j < window) }
		var logit float64
		for i := range T {
			for j := 0; j <= i; j++ {
				for h := range heads {
					if !sees(i, j) {
						continue
					}
					var d float64
					for e := range hd {
						d += q[i][h*hd+e] * k[j][h/(heads/kvHeads)*hd+e]
					}
					logit = max(logit, math.Abs(d))
				}
			}
		}
		want := modeltest.Attention64(q, k, v, heads, kvHeads, hd, 1, sees)
		// The exact softmax's own sensitivity: inputs moved by 1e-6 of themselves, at
		// scale 1 and at 1/sqrt(head_dim).
		var moves []float64
		for _, div := range []float64{1, math.Sqrt(float64(hd))} {
			jitter := func(x [][]float64) [][]float64 {
				out := make([][]float64, len(x))
				for i, row := range x {
					out[i] = make([]float64, len(row))
					for j, a := range row {
						out[i][j] = a * (1 + 1e-6*(2*r.Float64()-1))
					}
				}
				return out
			}
			base := modeltest.Attention64(q, k, v, heads, kvHeads, hd, div, sees)
			moved := modeltest.Attention64(jitter(q), jitter(k), jitter(v), heads, kvHeads, hd, div, sees)
			var diff, scale float64
			for i, row := range base {
				for j, w := range row {
					diff = max(diff, math.Abs(moved[i][j]-w))
					scale = max(scale, math.Abs(w))
				}
			}
			t.Logf("%s layer, exact softmax of q·k/%.2g: inputs moved by 1e-6 move the output by %.2e", layer.name, div, diff/scale)
			moves = append(moves, diff/scale)
		}
		if moves[0] < 2*moves[1] {
			t.Fatalf("%s layer: the inputs are not Gemma 4's regime: at scale 1 the exact softmax moves %.2g for 1e-6, at 1/sqrt(head_dim) %.2g", layer.name, moves[0], moves[1])
		}
		wantShared := modeltest.Attention64(qShared, k, v, heads, kvHeads, hd, 1, sees)

		var cache kvstore.Layer
		var err error
		if window > 0 {
			cache, err = kvstore.NewFullWindow(kvHeads, hd, hd, true, window)
		} else {
			cache, err = kvstore.NewFull(kvHeads, hd, hd, true)
		}
		if err != nil {
			t.Fatal(err)
		}
		input := func(c compute.Context, vc compute.VisionContext, rows [][]float64) compute.Tensor {
			var flat []float32
			for _, row := range rows {
				for _, x := range row {
					flat = append(flat, float32(x))
				}
			}
			return vc.Input(flat, len(rows), len(rows[0]))
		}
		var got, gotShared []float32
		start := 0
		for _, n := range passes {
			c := b.NewContext()
			vc, ok := compute.Ext[compute.VisionContext](c)
			sc, ok2 := compute.Ext[compute.SharedKVContext](c)
			if !ok || !ok2 {
				c.Close()
				t.Fatalf("the %s backend lacks tensors from data or KV-shared attention", b.Name())
			}
			rows := func(x [][]float64) compute.Tensor { return input(c, vc, x[start:start+n]) }
			own := c.Attention(rows(q), rows(k), rows(v), cache, heads, 1)
			shared := sc.AttentionShared(rows(qShared), cache, heads, 1, nil)
			a, err := c.Float32s(own)
			if err == nil {
				var s []float32
				s, err = c.Float32s(shared)
				gotShared = append(gotShared, s...)
			}
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, a...)
			start += n
		}
		for _, o := range []struct {
			what string
			got  []float32
			want [][]float64
		}{{"Attention", got, want}, {"AttentionShared", gotShared, wantShared}} {
			var diff, scale float64
			for i, row := range o.want {
				for j, w := range row {
					diff = max(diff, math.Abs(float64(o.got[i*len(row)+j])-w))
					scale = max(scale, math.Abs(w))
				}
			}
			t.Logf("%s layer (|q·k| up to %.1f), %s: %.2e of the float64 softmax", layer.name, logit, o.what, diff/scale)
			if diff/scale > 1e-5 {
				t.Errorf("%s layer, %s with scale 1 on %s: %.3g from the float64 softmax (float32 rounding: 1e-5)", layer.name, o.what, b.Name(), diff/scale)
			}
		}
	}
}
