package cpu

import (
	"math"
	"os"
	"sync"
	"unsafe"

	"github.com/mlxg/mlxg/internal/crew"
	"github.com/mlxg/mlxg/internal/quant"
)

// rowTile is the number of weight rows a prefill dequantizes at once.
const rowTile = 16

// linear computes out (T×w.out) = x (T×w.in) · wᵀ + bias.
func (b *Backend) linear(out, x []float32, T int, w *weight) {
	if w.q.Quantized() && T < 4 {
		b.quantMatVec(out, x, T, w, b.int8 == int8All)
	} else {
		b.gemm(out, x, T, w)
	}
	if w.bias != nil {
		for t := 0; t < T; t++ {
			addTo(out[t*w.out:(t+1)*w.out], w.bias)
		}
	}
}

// gemm is the prefill path: each tile of weight rows is read (and, when quantized,
// dequantized) once and multiplied with every token while it is in cache.
func (b *Backend) gemm(out, x []float32, T int, w *weight) {
	if T >= 4 && blocked {
		b.gemmBlocked(out, x, T, w)
		return
	}
	in := w.in
	b.parallel(w.out, rowTile, func(lo, hi int) {
		var tile []float32
		if w.q.Quantized() {
			tile = b.alloc(rowTile * in)
			defer b.release([][]float32{tile})
		}
		for o0 := lo; o0 < hi; o0 += rowTile {
			nr := min(rowTile, hi-o0)
			var rows []float32
			if w.q.Quantized() {
				rows = tile[:nr*in]
				w.dequantizeRows(rows, o0, nr)
			} else {
				rows = w.f[o0*in : (o0+nr)*in]
			}
			gemmTile(out, w.out, x, 0, T, in, rows, o0, nr)
		}
	})
}

// gemmTile: for tokens t0..t1-1 and the nr weight rows in rows (starting at output o0),
// out[t][o0+r] = x_t · rows[r], two tokens against four rows at a time.
func gemmTile(out []float32, outCols int, x []float32, t0, t1, in int, rows []float32, o0, nr int) {
	var acc8 [8]float32
	var acc4 [4]float32
	t := t0
	for ; t+2 <= t1; t += 2 {
		x0, x1 := x[t*in:(t+1)*in], x[(t+1)*in:(t+2)*in]
		y0, y1 := out[t*outCols+o0:][:nr], out[(t+1)*outCols+o0:][:nr]
		r := 0
		for ; r+4 <= nr; r += 4 {
			quant.DotRows4x2(&acc8, x0, x1, rows[r*in:], in)
			copy(y0[r:r+4], acc8[:4])
			copy(y1[r:r+4], acc8[4:])
		}
		for ; r < nr; r++ {
			y0[r] = quant.Dot(x0, rows[r*in:(r+1)*in])
			y1[r] = quant.Dot(x1, rows[r*in:(r+1)*in])
		}
	}
	for ; t < t1; t++ {
		xt := x[t*in : (t+1)*in]
		o := out[t*outCols+o0:][:nr]
		r := 0
		for ; r+4 <= nr; r += 4 {
			quant.DotRows4(&acc4, xt, rows[r*in:], in)
			copy(o[r:r+4], acc4[:])
		}
		for ; r < nr; r++ {
			o[r] = quant.Dot(xt, rows[r*in:(r+1)*in])
		}
	}
}

// quantMatVec is the decode path: each packed row is read once per token, straight
// from its codes, with the rows spread over the threads. A row's result depends on that
// row alone, so a batch's decode rows (vectorRows) go through it together, any T. int8
// asks for 8-bit inputs where the weights' format has the integer kernel.
func (b *Backend) quantMatVec(out, x []float32, T int, w *weight, int8 bool) {
	if w.q.Mode == quant.Affine {
		b.affineMatVecs([maxLinears][]float32{out}, x, T, [maxLinears]*weight{w}, 1, int8)
		return
	}
	in, g := w.in, w.q.GroupSize
	gpr, wpr := in/g, quant.Words(in, w.q.Bits)
	if w.q.Mode == quant.MXFP4 { // straight from the codes (gpt-oss's experts)
		b.parallel(w.out, 32, func(lo, hi int) {
			for o := lo; o < hi; o++ {
				packed, scales := w.packed[o*wpr:(o+1)*wpr], w.scales.F32[o*gpr:(o+1)*gpr]
				for t := 0; t < T; t++ {
					out[t*w.out+o] = quant.DotMXFP4Row(x[t*in:(t+1)*in], packed, scales)
				}
			}
		})
		return
	}
	b.parallel(w.out, 32, func(lo, hi int) {
		row := b.alloc(in)
		defer b.release([][]float32{row})
		for o := lo; o < hi; o++ {
			quant.DequantizeFPRow(row, w.packed[o*wpr:(o+1)*wpr], w.scales.F32[o*gpr:(o+1)*gpr], w.q.Bits, g)
			for t := 0; t < T; t++ {
				out[t*w.out+o] = quant.Dot(x[t*in:(t+1)*in], row)
			}
		}
	})
}

// affineMatVecs computes out[i] = x·ws[i]ᵀ (T rows of x, no bias) for the first n weights
// of ws, affine-quantized with equal input size, bits and group: the inputs prepared once,
// in sets of up to quant.VecsFor tokens, then the rows of all the weights, in order, split
// over the threads (parallel's pieces: every row costs the same, so finer pieces would add
// claims, not balance), each chunk of 64 rows reused from cache for every set. A set's
// kernel decodes a chunk's codes once for all its tokens; a row's result depends on that
// row and its token's input alone, the same in any set (quant.VecN's invariant). With int8
// (UseInt8) the inputs are 8-bit (int8MatVecs). The arrays come by value so that the
// closure holds copies instead of moving them to the heap.
func (b *Backend) affineMatVecs(out [maxLinears][]float32, x []float32, T int, ws [maxLinears]*weight, n int, int8 bool) {
	in, q := ws[0].in, ws[0].q
	defer b.warmNext(ws[0])
	if int8 && quant.Int8Supported(q.Bits, q.GroupSize) {
		b.int8MatVecs(out, x, T, ws, n)
		return
	}
	// Sets as even as can be (9 tokens in sets of at most 6: 5 and 4), so that none is left
	// with one token and no decode to share.
	per := quant.VecsFor(in, q.Bits)
	sets := (T + per - 1) / per
	vp := getVecNs(sets)
	defer vecNsPool.Put(vp)
	vecs := (*vp)[:sets]
	for s := range vecs {
		t0, t1 := s*T/sets, (s+1)*T/sets
		vecs[s].Prepare(x[t0*in:t1*in], t1-t0, q.Bits, q.GroupSize) // bits and group were validated at load
	}
	gpr, wpr := in/q.GroupSize, quant.Words(in, q.Bits)
	b.parallel(rowsOf(ws, n), 32, func(lo, hi int) {
		eachChunk(ws, n, lo, hi, func(i int, w *weight, c0, c1 int) {
			for s := range vecs {
				// the set's tokens' results for rows c0..c1-1, w.out apart
				o := out[i][s*T/sets*w.out+c0:]
				vecs[s].DotRowsStored(o, w.out, w.packed[c0*wpr:c1*wpr], w.scales.Slice(c0*gpr, c1*gpr), w.biases.Slice(c0*gpr, c1*gpr))
			}
		})
	})
}

// int8MatVecs is affineMatVecs with the inputs rounded to 8-bit integers per group
// (UseInt8): integer products inside each group, as llama.cpp computes on the CPU. Up to
// quant.Int8Vectors tokens share one Vec8, whose kernel reads each chunk of a row once for
// all of them; a token's result is the same in any such set (the kernel's invariant).
func (b *Backend) int8MatVecs(out [maxLinears][]float32, x []float32, T int, ws [maxLinears]*weight, n int) {
	in, q := ws[0].in, ws[0].q
	per := quant.Int8Vectors
	sets := (T + per - 1) / per
	vp := getVec8s(sets)
	defer vec8sPool.Put(vp)
	vecs := (*vp)[:sets]
	// Several sets (a batch of more than Int8Vectors decode rows) are rounded in parallel:
	// alone on the caller, the rounding would be a serial stretch of every product of a
	// batched step, the other threads spinning meanwhile. (The closure is made only then:
	// it escapes.)
	if sets > 1 {
		b.parallel(sets, 1, func(lo, hi int) {
			for s := lo; s < hi; s++ {
				t0, t1 := s*per, min((s+1)*per, T)
				vecs[s].PrepareN(x[t0*in:t1*in], t1-t0, q.Bits, q.GroupSize) // checked by the caller
			}
		})
	} else {
		vecs[0].PrepareN(x[:T*in], T, q.Bits, q.GroupSize)
	}
	gpr, wpr := in/q.GroupSize, quant.Words(in, q.Bits)
	b.parallel(rowsOf(ws, n), 32, func(lo, hi int) {
		eachChunk(ws, n, lo, hi, func(i int, w *weight, c0, c1 int) {
			for s := range vecs {
				// the set's tokens' results for rows c0..c1-1, w.out apart
				o := out[i][s*per*w.out+c0:]
				vecs[s].DotRowsStored(o, w.out, w.packed[c0*wpr:c1*wpr], w.scales.Slice(c0*gpr, c1*gpr), w.biases.Slice(c0*gpr, c1*gpr))
			}
		})
	})
}

// eachChunk calls fn for the rows lo..hi-1 of ws[:n]'s rows taken one weight after the
// other, in chunks of up to 64 rows of one weight (rows c0..c1-1 of weight i): a chunk stays
// in cache while every token's input meets it.
func eachChunk(ws [maxLinears]*weight, n, lo, hi int, fn func(i int, w *weight, c0, c1 int)) {
	first := 0 // of ws[i] in the concatenation
	for i := range n {
		w := ws[i]
		r0, r1 := max(lo-first, 0), min(hi-first, w.out)
		first += w.out
		for c0 := r0; c0 < r1; c0 += 64 {
			fn(i, w, c0, min(c0+64, r1))
		}
	}
}

// rowsOf is the number of output rows of ws[:n] together.
func rowsOf(ws [maxLinears]*weight, n int) int {
	rows := 0
	for i := range n {
		rows += ws[i].out
	}
	return rows
}

// vecNsPool recycles affineMatVecs's prepared input vectors.
var vecNsPool sync.Pool

var vec8sPool sync.Pool

func getVec8s(n int) *[]quant.Vec8 {
	if p, ok := vec8sPool.Get().(*[]quant.Vec8); ok && len(*p) >= n {
		return p
	}
	v := make([]quant.Vec8, max(n, 8))
	return &v
}

func getVecNs(n int) *[]quant.VecN {
	if p, ok := vecNsPool.Get().(*[]quant.VecN); ok && len(*p) >= n {
		return p
	}
	v := make([]quant.VecN, max(n, 4))
	return &v
}

// dequantizeRows expands nr weight rows starting at row o0 into dst (nr×in).
func (w *weight) dequantizeRows(dst []float32, o0, nr int) {
	in, g := w.in, w.q.GroupSize
	gpr, wpr := in/g, quant.Words(in, w.q.Bits)
	for r := 0; r < nr; r++ {
		o := o0 + r
		d := dst[r*in : (r+1)*in]
		if w.q.Mode == quant.Affine {
			quant.DequantizeRowStored(d, w.packed[o*wpr:(o+1)*wpr], w.scales.Slice(o*gpr, (o+1)*gpr), w.biases.Slice(o*gpr, (o+1)*gpr), w.q.Bits, g)
		} else {
			quant.DequantizeFPRow(d, w.packed[o*wpr:(o+1)*wpr], w.scales.F32[o*gpr:(o+1)*gpr], w.q.Bits, g)
		}
	}
}

// embedRow writes row id of w into dst.
func (w *weight) embedRow(dst []float32, id int) {
	if !w.q.Quantized() {
		copy(dst, w.f[id*w.in:(id+1)*w.in])
		return
	}
	w.dequantizeRows(dst, id, 1)
}

func addTo(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

// rmsNorm normalises each row of x (cols wide) into out and scales by w, summing
// squares in float64.
func rmsNorm(out, x, w []float32, cols int, eps float32) {
	for r := 0; r+cols <= len(x); r += cols {
		row, o := x[r:r+cols], out[r:r+cols]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(ss/float64(cols)+float64(eps)))
		for i, v := range row {
			o[i] = v * inv * w[i]
		}
	}
}

// ropeRow rotates the heads of one row in place: for each head, pairs (j, j+half) of
// its first 2*half columns, with cos and sin for this row's position.
func ropeRow(row []float32, headDim int, cos, sin []float32) {
	half := len(cos)
	for h := 0; h+headDim <= len(row); h += headDim {
		a, b := row[h:h+half], row[h+half:h+2*half]
		for j := range a {
			x1, x2 := a[j], b[j]
			a[j] = x1*cos[j] - x2*sin[j]
			b[j] = x2*cos[j] + x1*sin[j]
		}
	}
}

// ropeRowInterleaved is ropeRow over the pairs (2j, 2j+1) of each head's first
// 2·len(cos) columns (compute.RoPE.Interleaved).
func ropeRowInterleaved(row []float32, headDim int, cos, sin []float32) {
	for h := 0; h+headDim <= len(row); h += headDim {
		for j := range cos {
			x1, x2 := row[h+2*j], row[h+2*j+1]
			row[h+2*j] = x1*cos[j] - x2*sin[j]
			row[h+2*j+1] = x2*cos[j] + x1*sin[j]
		}
	}
}

// warmNext learns which product follows which (the order of a decode step's products is
// the same every step) and, once w's is done, has the crew's idle workers read the first
// warmBytes of the next one's weights into the caches while the caller does the serial
// work between the two (norms, RoPE, the KV append), where the memory bus would
// otherwise idle: a decode step is bound by reading the weights, so the bytes read
// early are time the next product does not spend.
func (b *Backend) warmNext(w *weight) {
	if w.transient {
		return
	}
	if prev := b.last.Swap(w); prev != nil && prev != w && prev.next.Load() != w {
		prev.next.Store(w)
	}
	next := w.next.Load()
	if next == nil || !warmOn || b.threads < 2 {
		return
	}
	t := next.warm.Load()
	if t == nil {
		packed := bytesOf(next.packed)
		frac := min(1, float64(warmBytes)/float64(len(packed)))
		t = crew.NewWarmTask(head(packed, frac), head(scaleBytes(next.scales), frac), head(scaleBytes(next.biases), frac))
		next.warm.Store(t)
	}
	crew.Warm(t)
}

// warmOn is false with MLXG_CPU_WARM=0 (for measurements).
var warmOn = os.Getenv("MLXG_CPU_WARM") != "0"

// warmBytes is how much of the next product's packed weights warmNext warms: about what
// two threads read in the gap between two products. The gap, not this size, limits
// what gets read, so a larger value buys nothing.
const warmBytes = 1 << 20

// scaleBytes is s's memory (one of its two slices is empty).
func scaleBytes(s quant.Scales) []byte {
	if len(s.F32) > 0 {
		return bytesOf(s.F32)
	}
	return bytesOf(s.Bits)
}

// bytesOf is s's memory as bytes.
func bytesOf[T uint16 | uint32 | float32](s []T) []byte {
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// head is the first frac of b.
func head(b []byte, frac float64) []byte { return b[:int(frac*float64(len(b)))] }
