package kvstore

// Prefill attention as small matrix products. For each tile (one KV head's keys and values
// at up to BlockTokens positions, dequantized once for the chunk's rows), the chunk's query
// vectors (rows × heads of the group) go six at a time through two register-blocked
// products: scores = queries · keysᵀ against the keys laid out in panels of 16 positions,
// then the online softmax of each vector over the positions it may see, then
// values += weights · values against the values in panels of 16 dimensions. Each
// multiply-add of the tile path (one query against four keys, then four values into one
// output) loads five vectors per four multiply-adds and sums across lanes every four keys;
// here it is eight loads per twelve, and no sums across lanes.

// blockedAttention turns the blocked path on (tests compare it with the plain one).
var blockedAttention = true

// blockedRows is the fewest query rows of a chunk that take the blocked path.
const blockedRows = 2

// useBlocked reports whether attendPart runs attendBlocked for rows r0..r1-1.
func useBlocked(r0, r1, vDim int) bool {
	return blockedAttention && r1-r0 >= blockedRows && vDim%16 == 0
}

// attendBlocked is attendPart for a chunk of query rows through mm6x16 (see above).
func attendBlocked(t tiler, s *scratch, a Attention, st *state, length, h, r0, r1, b0, b1 int) {
	kvHeads, kDim, vDim := t.Dims()
	group := a.Heads / kvHeads
	first := length - a.N // absolute position of query row 0
	nq := (r1 - r0) * group
	nq6 := (nq + 5) / 6 * 6
	q := s.grow(&s.q, nq6*kDim)
	for i := r0; i < r1; i++ {
		copy(q[(i-r0)*group*kDim:(i-r0+1)*group*kDim], a.Q[(i*a.Heads+h*group)*kDim:])
	}
	clear(q[nq*kDim:])
	kt, vt := s.grow(&s.k, BlockTokens*kDim), s.grow(&s.v, BlockTokens*vDim)
	kp, vp := s.grow(&s.kp, BlockTokens*kDim), s.grow(&s.vp, BlockTokens*vDim)
	sc := s.grow(&s.scores, 6*BlockTokens)
	pad := s.grow(&s.pad, 6*vDim) // the last block's outputs when nq is not a multiple of 6
	last := first + r1 - 1        // the last position any row of this chunk sees
	for from := b0 * BlockTokens; from < b1*BlockTokens && from <= last; from += BlockTokens {
		to := min(from+BlockTokens, last+1)
		n := to - from
		n16 := (n + 15) &^ 15
		t.tile(kt, vt, h, from, to)
		// Keys in panels of 16 positions: kp[p·16·kDim + e·16 + j] = key (16p+j), dim e.
		for p := 0; p < n16/16; p++ {
			panel := kp[p*16*kDim : (p+1)*16*kDim]
			for j := 0; j < 16; j++ {
				if 16*p+j >= n {
					for e := 0; e < kDim; e++ {
						panel[e*16+j] = 0
					}
					continue
				}
				key := kt[(16*p+j)*kDim : (16*p+j+1)*kDim]
				for e, x := range key {
					panel[e*16+j] = x
				}
			}
		}
		// Values in panels of 16 dimensions: vp[d·BlockTokens·16/16... ] = vp[(d/16)·n16·16 + j·16 + d%16].
		for d := 0; d < vDim; d += 16 {
			panel := vp[d*n16 : (d+16)*n16]
			for j := 0; j < n; j++ {
				copy(panel[j*16:(j+1)*16], vt[j*vDim+d:j*vDim+d+16])
			}
			clear(panel[n*16:])
		}
		for v0 := 0; v0 < nq; v0 += 6 {
			// Positions the block's vectors see: up to the last vector's row.
			lastRow := r0 + min(v0+5, nq-1)/group
			see := min(to, first+lastRow+1) - from
			if see <= 0 {
				continue
			}
			see16 := (see + 15) &^ 15
			mmKernel(q[v0*kDim:], kDim, kp, 16, kDim, sc, BlockTokens, false, see16/16, 16*kDim, 16)
			for v := 0; v < 6; v++ {
				row := sc[v*BlockTokens : v*BlockTokens+see16]
				k := v0 + v
				end := 0
				if k < nq {
					end = min(to, first+r0+k/group+1) - from
				}
				if end <= 0 {
					clear(row)
					continue
				}
				sv := row[:end]
				mx := scaleMax(sv, a.Scale, st.m[k])
				st.raise(k, mx, vDim)
				st.l[k] += expSum(sv, mx)
				clear(row[end:])
			}
			out, ostride := st.acc[v0*vDim:], vDim
			partial := v0+6 > nq
			if partial {
				copy(pad, st.acc[v0*vDim:nq*vDim])
				out = pad
			}
			mmKernel(sc, BlockTokens, vp, 16, see16, out, ostride, true, vDim/16, 16*n16, 16)
			if partial {
				copy(st.acc[v0*vDim:nq*vDim], pad)
			}
		}
	}
}

// mmKernel is mm6x16 through the assembly kernel where it runs, else the plain one, for
// panels of b bnext floats apart into columns of c cnext floats apart.
func mmKernel(a []float32, astride int, b []float32, bstride int, n int, c []float32, cstride int, acc bool, panels, bnext, cnext int) {
	_, _, _ = a[5*astride+n-1], b[(panels-1)*bnext+(n-1)*bstride+15], c[(panels-1)*cnext+5*cstride+15]
	if prefillSIMD {
		mm6x16(&a[0], astride, &b[0], bstride, n, &c[0], cstride, acc, panels, bnext, cnext)
		return
	}
	for p := 0; p < panels; p++ {
		mm6x16Ref(a, astride, b[p*bnext:], bstride, n, c[p*cnext:], cstride, acc)
	}
}

// mm6x16Ref is the plain reference of mm6x16: c[i·cstride+j] = (acc ? c : 0) +
// Σ_{e<n} a[i·astride+e]·b[e·bstride+j], i < 6, j < 16, summed in order of e.
func mm6x16Ref(a []float32, astride int, b []float32, bstride int, n int, c []float32, cstride int, acc bool) {
	for i := 0; i < 6; i++ {
		for j := 0; j < 16; j++ {
			var s float32
			if acc {
				s = c[i*cstride+j]
			}
			for e := 0; e < n; e++ {
				s += a[i*astride+e] * b[e*bstride+j]
			}
			c[i*cstride+j] = s
		}
	}
}
