package kvstore

import (
	"math"

	"golang.org/x/sys/cpu"
)

// fusedSIMD reports whether the kernels of fused_amd64.s run: decode attention over 4-,
// 6- and 8-bit affine and q4_0 caches reads the codes in place, and every attention's
// softmax is vectorized (tests turn it off to compare with the plain Go path).
var fusedSIMD = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

//go:noescape
func kdot8x2(out, q, qs *float32, codes *uint32, sb *uint16, n, cstride, hstride, groups, blocks int)

//go:noescape
func kdot4x2(out, q, qs *float32, codes *uint32, sb *uint16, n, cstride, hstride, groups, blocks int, q40 bool)

//go:noescape
func kdot6x2(out, q, qs *float32, codes *uint32, sb *uint16, n, cstride, hstride, groups, blocks int)

//go:noescape
func scaleMax2(sc *float32, n int, scale float32, mx *[2]float32)

//go:noescape
func expSum2(p, sc *float32, n int, mx, sum *[2]float32, t *[12][8]uint32)

//go:noescape
func scaleMax8(sc *float32, n int, scale float32, mx *[8]float32)

//go:noescape
func expSum8(p, sc *float32, n int, mx, sum *[8]float32, t *[12][8]uint32)

// expTable is expNeg's constants for EXPNEG, 8 copies each, in the order of the macro's
// offsets: the cut-off, log2(e), 1.5·2^23, ln2 high and low, the polynomial's
// coefficients of r³, r², r⁵, r⁴, r⁶ and 1, and 127 less 1.5·2^23's bits (the integer
// that turns the rounded sum's bits into a biased exponent).
var expTable = func() (t [12][8]uint32) {
	c := [11]float32{-87, expLog2e, expMagic, expLn2Hi, expLn2Lo, expC3, expC2, expC5, expC4, expC6, 1}
	for i := range t {
		for j := range t[i] {
			if i < len(c) {
				t[i][j] = math.Float32bits(c[i])
			} else {
				t[i][j] = 127 - math.Float32bits(expMagic)
			}
		}
	}
	return t
}()

//go:noescape
func vacc8x2(acc0, acc1, p *float32, codes *uint32, sb *uint16, n, cstride, hstride int)

//go:noescape
func vacc4x2(acc0, acc1, p *float32, codes *uint32, sb *uint16, n, cstride, hstride int, q40 bool)

//go:noescape
func vacc6x2(acc0, acc1, p *float32, codes *uint32, sb *uint16, n, cstride, hstride int)

// fusedRows is the most query rows of a chunk that take the fused path: the kernels
// convert each code once per row and pair of heads, where the tile path dequantizes a
// tile once for all rows, so prefill keeps the tiles.
const fusedRows = 4

// fusedSource is a cache kind whose rows the fused kernels can read in place.
type fusedSource interface {
	codecs() (k, v rowCodec)
	// rows returns head's keys and values of the n positions from, from+1, ... that lie
	// stride rows apart, 0 < n <= to-from.
	rows(head, from, to int) (k, v seg, stride, n int)
}

// fusable reports whether the kernels handle k and v: q4_0, or affine 4, 6 or 8 bits
// with key groups a multiple of 16 and value groups a multiple of 32.
func fusable(k, v rowCodec) bool {
	ok := func(f Format, unit int) bool {
		return f.Mode == Q4_0 || f.Mode == Affine && (f.Bits == 4 || f.Bits == 6 || f.Bits == 8) && f.Group%unit == 0
	}
	return ok(k.f, 16) && ok(v.f, 32)
}

// prepareQ writes query heads q0 and q1 in the key kernel's order into qp (2·dim) and
// their sums per key group, interleaved, into qs (2·groups). 4-bit runs of 16 put their
// 8 even elements first, as the kernel splits a byte's two codes; 6-bit elements are
// scaled by 2^-s (six), as the kernel reads code j of each 8 as code·2^s_j.
func prepareQ(qp, qs, q0, q1 []float32, k rowCodec) {
	dim := k.dim
	for h, q := range [2][]float32{q0, q1} {
		dst := qp[h*dim : (h+1)*dim]
		switch k.f.Bits {
		case 4:
			for b := 0; b < dim; b += 16 {
				for i := 0; i < 8; i++ {
					dst[b+i], dst[b+8+i] = q[b+2*i], q[b+2*i+1]
				}
			}
		case 6:
			for i, x := range q[:dim] {
				dst[i] = x * six[i%8]
			}
		default:
			copy(dst, q[:dim])
		}
		for g := 0; g < k.groups; g++ {
			var s float32
			for _, x := range q[g*k.f.Group : (g+1)*k.f.Group] {
				s += x
			}
			qs[2*g+h] = s
		}
	}
}

// scoresPair writes q_h·key_j into out[2j+h] for n positions of k, rows stride apart.
func scoresPair(out, qp, qs []float32, kc rowCodec, k seg, stride, n int) {
	_ = k.codes[(n-1)*stride*kc.words+kc.words-1]
	_ = k.halfs[(n-1)*stride*kc.halfs+kc.halfs-1]
	_, _, _ = out[2*n-1], qp[2*kc.dim-1], qs[2*kc.groups-1]
	cs, hs := stride*kc.words*4, stride*kc.halfs*2
	switch kc.f.Bits {
	case 8:
		kdot8x2(&out[0], &qp[0], &qs[0], &k.codes[0], &k.halfs[0], n, cs, hs, kc.groups, kc.f.Group/16)
	case 6:
		kdot6x2(&out[0], &qp[0], &qs[0], &k.codes[0], &k.halfs[0], n, cs, hs, kc.groups, kc.f.Group/16)
	default:
		kdot4x2(&out[0], &qp[0], &qs[0], &k.codes[0], &k.halfs[0], n, cs, hs, kc.groups, kc.f.Group/16, kc.f.Mode == Q4_0)
	}
}

// accumulatePair adds Σ_j p[2j+h]·value_j to acc_h for n positions of v, rows stride apart.
func accumulatePair(acc0, acc1, p []float32, vc rowCodec, v seg, stride, n int) {
	_ = v.codes[(n-1)*stride*vc.words+vc.words-1]
	_ = v.halfs[(n-1)*stride*vc.halfs+vc.halfs-1]
	_, _, _ = acc0[vc.dim-1], acc1[vc.dim-1], p[2*n-1]
	cs, hs := stride*vc.words*4, stride*vc.halfs*2
	wordsPer := vc.f.Bits // words of one run of 32 codes
	for c := 0; c < vc.dim/32; c++ {
		g := c * 32 / vc.f.Group
		codes, sb := &v.codes[c*wordsPer], &v.halfs[g*vc.halfs/vc.groups] // the group's (scale, bias), or q4_0's d
		switch vc.f.Bits {
		case 8:
			vacc8x2(&acc0[c*32], &acc1[c*32], &p[0], codes, sb, n, cs, hs)
		case 6:
			vacc6x2(&acc0[c*32], &acc1[c*32], &p[0], codes, sb, n, cs, hs)
		default:
			vacc4x2(&acc0[c*32], &acc1[c*32], &p[0], codes, sb, n, cs, hs, vc.f.Mode == Q4_0)
		}
	}
}

// six is the factor of a 6-bit key kernel's query element j, 2^-s for s = 6j mod 8: the
// kernels convert code j of each run of 8 as code·2^s (UNPACK6 in fused_amd64.h), so
// that no lane needs a shift; powers of two keep the products exact.
var six = [8]float32{1, 1.0 / 64, 1.0 / 16, 1.0 / 4, 1, 1.0 / 64, 1.0 / 16, 1.0 / 4}

// attendFused is attendPart for a few query rows over a 4-, 6- or 8-bit affine or q4_0 cache:
// scores and the weighted sum of values come straight from the codes. A group of 3 to 8
// query heads per KV head takes all its heads in one pass over the codes (the group
// kernels, fused_group_amd64.s); other groups go two heads per pass (an odd last head
// pairs with itself, its twin's weights zero). It reports false, doing nothing, where
// the tile path must run.
func attendFused(t tiler, s *scratch, a Attention, st *state, length, h, r0, r1, b0, b1 int) bool {
	src, ok := t.(fusedSource)
	if !ok || !fusedSIMD || r1-r0 > fusedRows {
		return false
	}
	kc, vc := src.codecs()
	if !fusable(kc, vc) {
		return false
	}
	kvHeads, kDim, vDim := t.Dims()
	group := a.Heads / kvHeads
	f := fusedRow{kc: kc, vc: vc, scale: a.Scale, group: group, wide: groupKernels && group >= 3 && group <= groupLanes}
	lanes := 2
	if f.wide {
		lanes = groupLanes
	}
	perQ, perS := f.prepared()
	qp, qs := s.grow(&s.q, (r1-r0)*perQ), s.grow(&s.qs, (r1-r0)*perS)
	for i := r0; i < r1; i++ {
		x := i - r0
		f.prepare(qp[x*perQ:(x+1)*perQ], qs[x*perS:(x+1)*perS], a.Q[(i*a.Heads+h*group)*kDim:][:group*kDim])
	}
	f.sc, f.p = s.grow(&s.scores, lanes*BlockTokens), s.grow(&s.p, lanes*BlockTokens)
	f.spare = s.grow(&s.spare, vDim)
	if f.wide {
		f.cf = s.grow(&s.cf, lanes*BlockTokens)
	}
	first := length - a.N
	last := first + r1 - 1
	for from := b0 * BlockTokens; from < b1*BlockTokens && from <= last; from += BlockTokens {
		to := min(from+BlockTokens, last+1)
		for i := r0; i < r1; i++ {
			x := i - r0
			f.qp, f.qs = qp[x*perQ:(x+1)*perQ], qs[x*perS:(x+1)*perS]
			end := min(to, first+i+1)
			for run := from; run < end; {
				ks, vs, stride, n := src.rows(h, run, end)
				f.attend(st, x*group, ks, vs, stride, n)
				run += n
			}
		}
	}
	return true
}

// fusedRow is one query row's group of heads in the fused path: its prepared query
// (prepareQ's pairs one after the other, or prepareQGroup's lanes when wide) and the
// scratch rows of a run.
type fusedRow struct {
	kc, vc           rowCodec
	scale            float32
	group            int
	wide             bool // the group kernels, all heads in one pass
	qp, qs           []float32
	sc, p, cf, spare []float32
}

// prepared returns the floats of one row's prepared query and of its sums per key group.
func (f *fusedRow) prepared() (qp, qs int) {
	if f.wide {
		return keyWidth(f.group) * f.kc.dim, groupLanes * f.kc.groups
	}
	pairs := (f.group + 1) / 2
	return pairs * 2 * f.kc.dim, pairs * 2 * f.kc.groups
}

// prepare writes a row's query heads q (group·dim floats) in the kernels' order.
func (f *fusedRow) prepare(qp, qs, q []float32) {
	dim := f.kc.dim
	if f.wide {
		prepareQGroup(qp, qs, q, f.group, f.kc)
		return
	}
	for pr := 0; pr < (f.group+1)/2; pr++ {
		g0, g1 := 2*pr, min(2*pr+1, f.group-1)
		prepareQ(qp[pr*2*dim:(pr+1)*2*dim], qs[pr*2*f.kc.groups:(pr+1)*2*f.kc.groups],
			q[g0*dim:(g0+1)*dim], q[g1*dim:(g1+1)*dim], f.kc)
	}
}

// attend folds n positions, rows stride apart from ks and vs, into the states of the
// row's heads, k to k+group-1.
func (f *fusedRow) attend(st *state, k int, ks, vs seg, stride, n int) {
	if f.wide {
		f.attendGroup(st, k, ks, vs, stride, n)
		return
	}
	kDim, groups, vDim := f.kc.dim, f.kc.groups, f.vc.dim
	for pr := 0; pr < (f.group+1)/2; pr++ {
		scoresPair(f.sc, f.qp[pr*2*kDim:(pr+1)*2*kDim], f.qs[pr*2*groups:(pr+1)*2*groups], f.kc, ks, stride, n)
		two := 2*pr+1 < f.group
		acc0, acc1 := st.softmaxPair(k+2*pr, two, f.sc, f.p, n, f.scale, vDim)
		if !two { // an odd group's last head: its twin adds nothing
			acc1 = f.spare
			for j := 0; j < n; j++ {
				f.p[2*j+1] = 0
			}
		}
		accumulatePair(acc0, acc1, f.p, f.vc, vs, stride, n)
	}
}

// softmaxPair folds n raw scores of two heads, sc[2j+h], into the online softmax of
// pairs k and k+1 (only k unless two): it scales them, rescales a pair's sum and values
// when its max grows, writes the weights e^(score-max) to p[2j+h] and returns the
// pairs' value accumulators for the caller to add the weighted values to. Runs of 4
// positions take scaleMax2 and expSum2, the rest expNeg.
func (st *state) softmaxPair(k int, two bool, sc, p []float32, n int, scale float32, vDim int) (acc0, acc1 []float32) {
	lanes := 1
	if two {
		lanes = 2
	}
	_, _ = sc[2*n-1], p[2*n-1]
	mx := [2]float32{st.m[k], float32(math.Inf(-1))}
	if two {
		mx[1] = st.m[k+1]
	}
	n4 := n &^ 3
	if n4 > 0 {
		scaleMax2(&sc[0], n4, scale, &mx)
	}
	for i := 2 * n4; i < 2*n; i++ {
		sc[i] *= scale
		mx[i&1] = max(mx[i&1], sc[i])
	}
	if !two {
		mx[1] = mx[0] // the twin's weights are dropped; keep its exponents finite
	}
	for h := 0; h < lanes; h++ {
		st.raise(k+h, mx[h], vDim)
	}
	var sum [2]float32
	if n4 > 0 {
		expSum2(&p[0], &sc[0], n4, &mx, &sum, &expTable)
	}
	for i := 2 * n4; i < 2*n; i++ {
		p[i] = expNeg(sc[i] - mx[i&1])
		sum[i&1] += p[i]
	}
	acc0 = st.acc[k*vDim : (k+1)*vDim]
	st.l[k] += sum[0]
	if two {
		acc1 = st.acc[(k+1)*vDim : (k+2)*vDim]
		st.l[k+1] += sum[1]
	}
	return acc0, acc1
}

// scaleMax multiplies the scores sc by scale and returns the larger of mx and their
// maximum; runs of 8 take scaleMax2 (as 4 positions of two heads with one max).
func scaleMax(sc []float32, scale, mx float32) float32 {
	i := 0
	if fusedSIMD && len(sc) >= 8 {
		i = len(sc) &^ 7
		m := [2]float32{mx, mx}
		scaleMax2(&sc[0], i/2, scale, &m)
		mx = max(m[0], m[1])
	}
	for ; i < len(sc); i++ {
		sc[i] *= scale
		mx = max(mx, sc[i])
	}
	return mx
}

// expSum replaces the scores sc by e^(score-mx) and returns their sum; runs of 8 take
// expSum2 as scaleMax does scaleMax2.
func expSum(sc []float32, mx float32) float32 {
	i := 0
	var s float32
	if fusedSIMD && len(sc) >= 8 {
		i = len(sc) &^ 7
		m, sum := [2]float32{mx, mx}, [2]float32{}
		expSum2(&sc[0], &sc[0], i/2, &m, &sum, &expTable)
		s = sum[0] + sum[1]
	}
	for ; i < len(sc); i++ {
		sc[i] = expNeg(sc[i] - mx)
		s += sc[i]
	}
	return s
}
