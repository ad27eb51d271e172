package kvstore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// fusedFormats are the formats the kernels read, keys and values alike.
var fusedFormats = []Format{AffineFormat(8, 32), AffineFormat(8, 64), AffineFormat(8, 128),
	AffineFormat(6, 32), AffineFormat(6, 64), AffineFormat(6, 128),
	AffineFormat(4, 32), AffineFormat(4, 64), AffineFormat(4, 128), FormatQ4_0}

// TestFusedKernels checks the key and value kernels against plain float64 arithmetic
// on the decoded rows, for every format they read and the head dims models use, at a
// stride of 3 rows.
func TestFusedKernels(t *testing.T) {
	if !fusedSIMD {
		t.Skip("no fused kernels on this CPU")
	}
	r := rand.New(rand.NewPCG(21, 21))
	const stride, n = 3, 37
	for _, f := range fusedFormats {
		for _, dim := range []int{64, 96, 128, 256} {
			if dim%f.Group != 0 {
				continue
			}
			c := newRowCodec(f, dim)
			s := fillRows(r, c, stride*n)
			rows := make([][]float64, n)
			buf := make([]float32, dim)
			for j := range rows {
				c.get(buf, s, j*stride)
				rows[j] = make([]float64, dim)
				for d, x := range buf {
					rows[j][d] = float64(x)
				}
			}
			q0, q1 := randVec(r, dim), randVec(r, dim)
			qp, qs := make([]float32, 2*dim), make([]float32, 2*c.groups)
			prepareQ(qp, qs, q0, q1, c)
			out := make([]float32, 2*n)
			scoresPair(out, qp, qs, c, s, stride, n)
			for j := 0; j < n; j++ {
				for h, q := range [][]float32{q0, q1} {
					var want, mag float64
					for d, x := range rows[j] {
						want += float64(q[d]) * x
						mag += math.Abs(float64(q[d]) * x)
					}
					if math.Abs(float64(out[2*j+h])-want) > 1e-5*mag+1e-5 {
						t.Fatalf("%v dim %d: score of head %d at %d = %v, want %v", f, dim, h, j, out[2*j+h], want)
					}
				}
			}
			p := randVec(r, 2*n)
			accs := [2][]float32{randVec(r, dim), randVec(r, dim)}
			var want, mag [2][]float64
			for h := range accs {
				want[h], mag[h] = make([]float64, dim), make([]float64, dim)
				for d, x := range accs[h] {
					want[h][d], mag[h][d] = float64(x), math.Abs(float64(x))
					for j := range rows {
						want[h][d] += float64(p[2*j+h]) * rows[j][d]
						mag[h][d] += math.Abs(float64(p[2*j+h]) * rows[j][d])
					}
				}
			}
			accumulatePair(accs[0], accs[1], p, c, s, stride, n)
			for h := range accs {
				for d, x := range accs[h] {
					if math.Abs(float64(x)-want[h][d]) > 1e-5*mag[h][d]+1e-6 {
						t.Fatalf("%v dim %d: head %d accumulated element %d = %v, want %v", f, dim, h, d, x, want[h][d])
					}
				}
			}
		}
	}
}

// TestFusedAttendMatchesTiles: decode and few-row attention through the fused kernels
// agrees with the tile path and with float64 attention on the dequantized cache, for
// odd and even query groups (of 3 to 8 heads through the group kernels and the pair
// kernels), blocks split over threads, and a partial last block.
func TestFusedAttendMatchesTiles(t *testing.T) {
	if !fusedSIMD {
		t.Skip("no fused kernels on this CPU")
	}
	r := rand.New(rand.NewPCG(22, 22))
	const kvHeads = 2
	for _, tc := range []struct {
		dim, length int
		specs       []Spec
	}{
		{128, 700, []Spec{
			{K: AffineFormat(8, 64), V: AffineFormat(4, 32)},
			{K: AffineFormat(4, 64), V: AffineFormat(4, 32)},
			{K: AffineFormat(8, 32), V: AffineFormat(8, 64)},
			{K: AffineFormat(4, 128), V: AffineFormat(8, 128)},
			{K: FormatQ4_0, V: FormatQ4_0},
			{K: AffineFormat(8, 64), V: FormatQ4_0},
			{K: AffineFormat(6, 64).Rotate(true), V: AffineFormat(6, 64).Rotate(true)},
			{K: AffineFormat(6, 32), V: AffineFormat(6, 128)},
			{K: AffineFormat(6, 128), V: AffineFormat(8, 64)},
			{K: AffineFormat(8, 64), V: AffineFormat(6, 32)},
		}},
		// 6-bit at the other head dims models use, ragged lengths (a partial block
		// after one or two full ones).
		{64, 300, []Spec{{K: AffineFormat(6, 64).Rotate(true), V: AffineFormat(6, 64).Rotate(true)},
			{K: AffineFormat(6, 32), V: AffineFormat(6, 64)}}},
		{96, 513, []Spec{{K: AffineFormat(6, 32), V: AffineFormat(6, 32)}}},
		{256, 277, []Spec{{K: AffineFormat(6, 64), V: AffineFormat(6, 64)}, {K: AffineFormat(8, 64).Rotate(true), V: AffineFormat(8, 64).Rotate(true)}, {K: AffineFormat(6, 64).Rotate(true), V: AffineFormat(6, 64).Rotate(true)}}},
	} {
		dim, length := tc.dim, tc.length
		k, v := randVec(r, length*kvHeads*dim), randVec(r, length*kvHeads*dim)
		for _, spec := range tc.specs {
			fusedAttendCase(t, r, spec, k, v, kvHeads, dim, length)
		}
	}
}

// fusedAttendCase is one cache of TestFusedAttendMatchesTiles.
func fusedAttendCase(t *testing.T, r *rand.Rand, spec Spec, k, v []float32, kvHeads, dim, length int) {
	c, err := NewQuantized(kvHeads, dim, dim, spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Append(k, v, length); err != nil {
		t.Fatal(err)
	}
	refK, refV := refDequant(spec.K, k, dim), refDequant(spec.V, v, dim)
	// The value kernels add a group's bias term Σ p·bias once to all its elements, so
	// its rounding is one offset over the group, which the rotation back (or a wide
	// head's longer sums) gathers into a few outputs: a looser bound against the tiles,
	// which round each element apart.
	tol := 2e-6
	if spec.V.Rotated || dim > 128 {
		tol = 6e-6
	}
	for _, heads := range []int{2, 6, 8, 10, 14, 16} {
		for _, n := range []int{1, 3} {
			for _, threads := range []int{1, 4} {
				groupKernels = threads == 1 // the pair kernels take every group with 4 threads
				name := fmt.Sprintf("%v dim %d heads %d rows %d threads %d", spec, dim, heads, n, threads)
				q := randVec(r, n*heads*dim)
				a := Attention{Q: q, N: n, Heads: heads, Scale: 0.088, Threads: threads}
				fused, tiles := make([]float32, n*heads*dim), make([]float32, n*heads*dim)
				a.Out = fused
				if err := c.Attend(a); err != nil {
					t.Fatal(err)
				}
				fusedSIMD = false
				a.Out = tiles
				err := c.Attend(a)
				fusedSIMD = true
				if err != nil {
					t.Fatal(err)
				}
				groupKernels = true
				want := refAttention(q, refK, refV, n, length, heads, kvHeads, dim, dim, 0.088)
				for i := range want {
					if d := math.Abs(float64(fused[i] - tiles[i])); d > tol {
						t.Fatalf("%s: element %d fused %v, tiles %v", name, i, fused[i], tiles[i])
					}
					if d := math.Abs(float64(fused[i] - want[i])); d > 3e-5 {
						t.Fatalf("%s: element %d fused %v, reference %v", name, i, fused[i], want[i])
					}
				}
			}
		}
	}
}

// TestFusedRotatingMatchesTiles: decode over a quantized sliding window, whose ring
// wraps inside a tile, agrees with the tile path.
func TestFusedRotatingMatchesTiles(t *testing.T) {
	if !fusedSIMD {
		t.Skip("no fused kernels on this CPU")
	}
	r := rand.New(rand.NewPCG(23, 23))
	const kvHeads, heads, dim, window = 2, 6, 128, 300
	for _, spec := range []Spec{{K: AffineFormat(8, 64), V: AffineFormat(4, 32)}, {K: FormatQ4_0, V: FormatQ4_0},
		{K: AffineFormat(6, 64), V: AffineFormat(6, 64)}} {
		c, err := NewRotating(kvHeads, dim, dim, window, spec, 0)
		if err != nil {
			t.Fatal(err)
		}
		for step, n := range []int{256, 200, 1, 1, 37, 1, 1, 1} {
			if err := c.Append(randVec(r, n*kvHeads*dim), randVec(r, n*kvHeads*dim), n); err != nil {
				t.Fatal(err)
			}
			rows := min(n, 2)
			q := randVec(r, rows*heads*dim)
			a := Attention{Q: q, N: rows, Heads: heads, Scale: 0.088, Threads: 2}
			fused, tiles := make([]float32, rows*heads*dim), make([]float32, rows*heads*dim)
			a.Out = fused
			if err := c.Attend(a); err != nil {
				t.Fatal(err)
			}
			fusedSIMD = false
			a.Out = tiles
			err := c.Attend(a)
			fusedSIMD = true
			if err != nil {
				t.Fatal(err)
			}
			for i := range fused {
				if math.Abs(float64(fused[i]-tiles[i])) > 2e-6 {
					t.Fatalf("%v step %d: element %d fused %v, tiles %v", spec, step, i, fused[i], tiles[i])
				}
			}
		}
	}
}

// TestSoftmaxKernels: scaleMax2 and expSum2 give expNeg's weights bit for bit, the
// per-head maxima exactly and the sums to float rounding, scores past the cut-off and
// -Inf included.
func TestSoftmaxKernels(t *testing.T) {
	if !fusedSIMD {
		t.Skip("no fused kernels on this CPU")
	}
	r := rand.New(rand.NewPCG(24, 24))
	const n = 64
	sc := make([]float32, 2*n)
	for i := range sc {
		sc[i] = float32(r.NormFloat64() * 30)
	}
	sc[5], sc[8] = float32(math.Inf(-1)), -200
	want := append([]float32(nil), sc...)
	wantMx := [2]float32{3, float32(math.Inf(-1))}
	for i := range want {
		want[i] *= 0.7
		wantMx[i&1] = max(wantMx[i&1], want[i])
	}
	mx := [2]float32{3, float32(math.Inf(-1))}
	scaleMax2(&sc[0], n, 0.7, &mx)
	if mx != wantMx {
		t.Fatalf("maxima %v, want %v", mx, wantMx)
	}
	for i := range sc {
		if sc[i] != want[i] {
			t.Fatalf("scaled score %d = %v, want %v", i, sc[i], want[i])
		}
	}
	p := make([]float32, 2*n)
	var sum [2]float32
	expSum2(&p[0], &sc[0], n, &mx, &sum, &expTable)
	var wantSum [2]float64
	for i, x := range sc {
		e := expNeg(x - mx[i&1])
		if p[i] != e {
			t.Fatalf("weight %d of score %v = %v, expNeg %v", i, x-mx[i&1], p[i], e)
		}
		wantSum[i&1] += float64(e)
	}
	for h := range sum {
		if math.Abs(float64(sum[h])-wantSum[h]) > 1e-6*wantSum[h] {
			t.Fatalf("sum of head %d = %v, want %v", h, sum[h], wantSum[h])
		}
	}
}

// TestScaleMaxExpSum: the tile path's softmax helpers, any length, agree with the
// plain loops (weights and maxima bit for bit).
func TestScaleMaxExpSum(t *testing.T) {
	if !fusedSIMD {
		t.Skip("no fused kernels on this CPU")
	}
	r := rand.New(rand.NewPCG(25, 25))
	for n := 1; n <= 40; n++ {
		sc := randVec(r, n)
		for i := range sc {
			sc[i] *= 20
		}
		plain := append([]float32(nil), sc...)
		mx := scaleMax(sc, 0.3, -5)
		sum := expSum(sc, mx)
		fusedSIMD = false
		wantMx := scaleMax(plain, 0.3, -5)
		wantSum := expSum(plain, wantMx)
		fusedSIMD = true
		if mx != wantMx {
			t.Fatalf("n %d: max %v, plain %v", n, mx, wantMx)
		}
		for i := range sc {
			if sc[i] != plain[i] {
				t.Fatalf("n %d: weight %d = %v, plain %v", n, i, sc[i], plain[i])
			}
		}
		if math.Abs(float64(sum-wantSum)) > 1e-6*float64(wantSum) {
			t.Fatalf("n %d: sum %v, plain %v", n, sum, wantSum)
		}
	}
}
