package kvstore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestGroupKernels checks the group kernels' scores and value sums against plain float64
// arithmetic on the decoded rows, for every format they read, groups of 3 to 8 heads, at
// a stride of 3 rows; a head past the group must leave the state alone.
func TestGroupKernels(t *testing.T) {
	if !fusedSIMD {
		t.Skip("no fused kernels on this CPU")
	}
	r := rand.New(rand.NewPCG(31, 31))
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
			for heads := 3; heads <= groupLanes; heads++ {
				name := fmt.Sprintf("%v dim %d heads %d", f, dim, heads)
				q := randVec(r, heads*dim)
				qp, qs := make([]float32, keyWidth(heads)*dim), make([]float32, groupLanes*c.groups)
				prepareQGroup(qp, qs, q, heads, c)
				out := make([]float32, groupLanes*n)
				scoresGroup(out, qp, qs, heads, c, s, stride, n)
				for j := 0; j < n; j++ {
					for h := 0; h < groupLanes; h++ {
						var want, mag float64
						if h < heads {
							for d, x := range rows[j] {
								want += float64(q[h*dim+d]) * x
								mag += math.Abs(float64(q[h*dim+d]) * x)
							}
						}
						if math.Abs(float64(out[groupLanes*j+h])-want) > 1e-5*mag+1e-5 {
							t.Fatalf("%s: score of head %d at %d = %v, want %v", name, h, j, out[groupLanes*j+h], want)
						}
					}
				}

				// Two rows' states side by side: the first row's heads must not spill
				// into the second's.
				st := state{acc: randVec(r, 2*heads*dim)}
				before := append([]float32(nil), st.acc...)
				fr := fusedRow{vc: c, group: heads, p: randVec(r, groupLanes*n),
					cf: make([]float32, groupLanes*n), spare: make([]float32, dim)}
				fr.accumulateGroup(&st, 0, s, stride, n)
				for h := 0; h < heads; h++ {
					for d := 0; d < dim; d++ {
						want, mag := float64(before[h*dim+d]), math.Abs(float64(before[h*dim+d]))
						for j := range rows {
							want += float64(fr.p[groupLanes*j+h]) * rows[j][d]
							mag += math.Abs(float64(fr.p[groupLanes*j+h]) * rows[j][d])
						}
						if got := st.acc[h*dim+d]; math.Abs(float64(got)-want) > 1e-5*mag+1e-6 {
							t.Fatalf("%s: head %d accumulated element %d = %v, want %v", name, h, d, got, want)
						}
					}
				}
				for i := heads * dim; i < len(st.acc); i++ {
					if st.acc[i] != before[i] {
						t.Fatalf("%s: the next row's element %d changed", name, i-heads*dim)
					}
				}
			}
		}
	}
}

// TestSoftmaxKernels8: scaleMax8 and expSum8 give expNeg's weights bit for bit, each
// lane's maximum exactly and the sums to float rounding.
func TestSoftmaxKernels8(t *testing.T) {
	if !fusedSIMD {
		t.Skip("no fused kernels on this CPU")
	}
	r := rand.New(rand.NewPCG(32, 32))
	const n = 41
	sc := make([]float32, 8*n)
	for i := range sc {
		sc[i] = float32(r.NormFloat64() * 30)
	}
	sc[5], sc[8], sc[100] = float32(math.Inf(-1)), -200, 150
	want := append([]float32(nil), sc...)
	inf := float32(math.Inf(-1))
	start := [8]float32{3, inf, -1, 0, 200, inf, 7, -50}
	wantMx := start
	for i := range want {
		want[i] *= 0.7
		wantMx[i&7] = max(wantMx[i&7], want[i])
	}
	mx := start
	scaleMax8(&sc[0], n, 0.7, &mx)
	if mx != wantMx {
		t.Fatalf("maxima %v, want %v", mx, wantMx)
	}
	for i := range sc {
		if sc[i] != want[i] {
			t.Fatalf("scaled score %d = %v, want %v", i, sc[i], want[i])
		}
	}
	p := make([]float32, 8*n)
	var sum [8]float32
	expSum8(&p[0], &sc[0], n, &mx, &sum, &expTable)
	var wantSum [8]float64
	for i, x := range sc {
		e := expNeg(x - mx[i&7])
		if p[i] != e {
			t.Fatalf("weight %d of score %v = %v, expNeg %v", i, x-mx[i&7], p[i], e)
		}
		wantSum[i&7] += float64(e)
	}
	for h := range sum {
		if math.Abs(float64(sum[h])-wantSum[h]) > 1e-6*wantSum[h] {
			t.Fatalf("sum of lane %d = %v, want %v", h, sum[h], wantSum[h])
		}
	}
}
