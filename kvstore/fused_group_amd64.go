package kvstore

import "math"

// The group kernels (fused_group_amd64.s) take every query head of a GQA group, 3 to 8
// of them, in one pass over a run of positions: a key's codes are converted once for
// all the heads, where the pair kernels convert them once per pair (4 times for a group
// of 7), and a value's codes once per 4 heads. The heads lie in the 8 lanes of a
// register: scores, weights and softmax states are 8 floats a position, the lanes past
// the group computed over a zero query (or, for groups of 3 and 4, whose key kernels
// take 4 heads, left zero) and dropped.

// groupLanes is the most heads the group kernels take in one pass.
const groupLanes = 8

// groupKernels turns the group kernels on (tests turn them off to compare with the
// pair kernels).
var groupKernels = true

//go:noescape
func kdot8x8(out, q, qs *float32, codes *uint32, sb *uint16, n, cstride, hstride, groups, blocks int)

//go:noescape
func kdot4x8(out, q, qs *float32, codes *uint32, sb *uint16, n, cstride, hstride, groups, blocks int, q40 bool)

//go:noescape
func kdot8x4(out, q, qs *float32, codes *uint32, sb *uint16, n, cstride, hstride, groups, blocks int)

//go:noescape
func kdot6x8(out, q, qs *float32, codes *uint32, sb *uint16, n, cstride, hstride, groups, blocks int)

//go:noescape
func kdot6x4(out, q, qs *float32, codes *uint32, sb *uint16, n, cstride, hstride, groups, blocks int)

//go:noescape
func kdot4x4(out, q, qs *float32, codes *uint32, sb *uint16, n, cstride, hstride, groups, blocks int, q40 bool)

// keyWidth is the heads a key kernel takes for a group of heads: 4 or 8.
func keyWidth(heads int) int {
	if heads <= 4 {
		return 4
	}
	return groupLanes
}

// scaleMax8 and expSum8 are in fused_amd64.s, beside their two-head forms.

//go:noescape
func vcoef8(cf, bsum, p *float32, sb *uint16, n, hstride int, q40 bool)

//go:noescape
func vacc8h4(acc0, acc1, acc2, acc3, cf *float32, codes *uint32, n, cstride int)

//go:noescape
func vacc4h4(acc0, acc1, acc2, acc3, cf *float32, codes *uint32, n, cstride int)

//go:noescape
func vacc6h4(acc0, acc1, acc2, acc3, cf *float32, codes *uint32, n, cstride int)

// prepareQGroup writes a row's heads query heads q (heads·dim floats) in the group key
// kernels' order into qp (keyWidth(heads)·dim): for each run of 16 elements, the run of
// head 0, then of head 1, ... up to the kernel's width, heads past the group zero;
// 4-bit runs put their 8 even elements first and 6-bit elements are scaled, as prepareQ
// does. qs (8·groups) gets each
// key group's sum per head.
func prepareQGroup(qp, qs, q []float32, heads int, k rowCodec) {
	width := keyWidth(heads)
	dim := k.dim
	clear(qp)
	clear(qs)
	for h := 0; h < heads; h++ {
		src := q[h*dim : (h+1)*dim]
		for b := 0; b < dim; b += 16 {
			dst := qp[b*width+h*16:][:16]
			switch k.f.Bits {
			case 4:
				for i := 0; i < 8; i++ {
					dst[i], dst[8+i] = src[b+2*i], src[b+2*i+1]
				}
			case 6:
				for i := range dst {
					dst[i] = src[b+i] * six[i%8]
				}
			default:
				copy(dst, src[b:b+16])
			}
		}
		for g := 0; g < k.groups; g++ {
			var s float32
			for _, x := range src[g*k.f.Group : (g+1)*k.f.Group] {
				s += x
			}
			qs[g*groupLanes+h] = s
		}
	}
}

// scoresGroup writes q_h·key_j into out[8j+h] for n positions of k, rows stride apart,
// for a group of heads heads (qp and qs from prepareQGroup).
func scoresGroup(out, qp, qs []float32, heads int, kc rowCodec, k seg, stride, n int) {
	width := keyWidth(heads)
	_ = k.codes[(n-1)*stride*kc.words+kc.words-1]
	_ = k.halfs[(n-1)*stride*kc.halfs+kc.halfs-1]
	_, _, _ = out[groupLanes*n-1], qp[width*kc.dim-1], qs[groupLanes*kc.groups-1]
	cs, hs, blocks, q40 := stride*kc.words*4, stride*kc.halfs*2, kc.f.Group/16, kc.f.Mode == Q4_0
	switch {
	case kc.f.Bits == 6 && width == 4:
		kdot6x4(&out[0], &qp[0], &qs[0], &k.codes[0], &k.halfs[0], n, cs, hs, kc.groups, blocks)
	case kc.f.Bits == 6:
		kdot6x8(&out[0], &qp[0], &qs[0], &k.codes[0], &k.halfs[0], n, cs, hs, kc.groups, blocks)
	case kc.f.Bits == 8 && width == 4:
		kdot8x4(&out[0], &qp[0], &qs[0], &k.codes[0], &k.halfs[0], n, cs, hs, kc.groups, blocks)
	case kc.f.Bits == 8:
		kdot8x8(&out[0], &qp[0], &qs[0], &k.codes[0], &k.halfs[0], n, cs, hs, kc.groups, blocks)
	case width == 4:
		kdot4x4(&out[0], &qp[0], &qs[0], &k.codes[0], &k.halfs[0], n, cs, hs, kc.groups, blocks, q40)
	default:
		kdot4x8(&out[0], &qp[0], &qs[0], &k.codes[0], &k.halfs[0], n, cs, hs, kc.groups, blocks, q40)
	}
}

// softmaxGroup folds n raw scores of heads k..k+heads-1, sc[8j+h], into their online
// softmax: as softmaxPair, with every position's 8 lanes in one vector. It writes the
// weights e^(score-max) to p[8j+h].
func (st *state) softmaxGroup(k, heads int, sc, p []float32, n int, scale float32, vDim int) {
	_, _ = sc[groupLanes*n-1], p[groupLanes*n-1]
	var mx [groupLanes]float32
	for h := range mx {
		mx[h] = float32(math.Inf(-1))
		if h < heads {
			mx[h] = st.m[k+h]
		}
	}
	scaleMax8(&sc[0], n, scale, &mx)
	for h := 0; h < heads; h++ {
		st.raise(k+h, mx[h], vDim)
	}
	var sum [groupLanes]float32
	expSum8(&p[0], &sc[0], n, &mx, &sum, &expTable)
	for h := 0; h < heads; h++ {
		st.l[k+h] += sum[h]
	}
}

// accumulateGroup adds Σ_j p[8j+h]·value_j to the accumulators of heads k..k+heads-1
// for n positions of v, rows stride apart. Per value group, vcoef8 folds each position's
// scale into the weights (cf) and sums the bias terms; the value kernels then take the
// group's runs of 32 codes 4 heads at a time (a head past the group writes to spare).
func (f *fusedRow) accumulateGroup(st *state, k int, vs seg, stride, n int) {
	vc, heads := f.vc, f.group
	_ = vs.codes[(n-1)*stride*vc.words+vc.words-1]
	_ = vs.halfs[(n-1)*stride*vc.halfs+vc.halfs-1]
	_, _ = f.p[groupLanes*n-1], f.cf[groupLanes*n-1]
	cs, hs := stride*vc.words*4, stride*vc.halfs*2
	dim := vc.dim
	runs := dim / vc.groups / 32 // runs of 32 codes a group
	acc := func(h, d int) *float32 {
		if h >= heads {
			return &f.spare[d]
		}
		return &st.acc[(k+h)*dim+d]
	}
	for g := 0; g < vc.groups; g++ {
		var bsum [groupLanes]float32
		vcoef8(&f.cf[0], &bsum[0], &f.p[0], &vs.halfs[g*vc.halfs/vc.groups], n, hs, vc.f.Mode == Q4_0)
		for c := g * runs; c < (g+1)*runs; c++ {
			codes, d := &vs.codes[c*vc.f.Bits], c*32 // a run of 32 codes is Bits words
			for h := 0; h < heads; h += 4 {
				switch vc.f.Bits {
				case 8:
					vacc8h4(acc(h, d), acc(h+1, d), acc(h+2, d), acc(h+3, d), &f.cf[h], codes, n, cs)
				case 6:
					vacc6h4(acc(h, d), acc(h+1, d), acc(h+2, d), acc(h+3, d), &f.cf[h], codes, n, cs)
				default:
					vacc4h4(acc(h, d), acc(h+1, d), acc(h+2, d), acc(h+3, d), &f.cf[h], codes, n, cs)
				}
			}
		}
		for h := 0; h < heads; h++ {
			o := st.acc[(k+h)*dim+g*runs*32:][:runs*32]
			for d := range o {
				o[d] += bsum[h]
			}
		}
	}
}

// attendGroup is attend for the group kernels.
func (f *fusedRow) attendGroup(st *state, k int, ks, vs seg, stride, n int) {
	scoresGroup(f.sc, f.qp, f.qs, f.group, f.kc, ks, stride, n)
	st.softmaxGroup(k, f.group, f.sc, f.p, n, f.scale, f.vc.dim)
	f.accumulateGroup(st, k, vs, stride, n)
}
