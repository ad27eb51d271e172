package kvstore

import (
	"math"

	"github.com/mlxg/mlxg/internal/half"
	"github.com/mlxg/mlxg/internal/quant"
)

// rowCodec stores vectors of dim elements (one head's key or value at one position) in
// a Format. A row is `words` uint32 of packed codes (MLX's layout from internal/quant;
// q4_0 uses the same 4-bit packing) and `halfs` fp16 values: the elements themselves
// (F16), a scale and a bias per group (Affine), or a scale per group (Q4_0).
type rowCodec struct {
	f      Format
	dim    int
	words  int
	halfs  int
	groups int
}

func newRowCodec(f Format, dim int) rowCodec {
	c := rowCodec{f: f, dim: dim}
	switch f.Mode {
	case F16:
		c.halfs = dim
	case Affine:
		c.groups = dim / f.Group
		c.words = quant.Words(dim, f.Bits)
		c.halfs = 2 * c.groups
	case Q4_0:
		c.groups = dim / 32
		c.words = quant.Words(dim, 4)
		c.halfs = c.groups
	}
	return c
}

// seg is the storage of a run of rows.
type seg struct {
	codes []uint32
	halfs []uint16
}

func (c rowCodec) newSeg(rows int) seg {
	return seg{codes: blockSlice[uint32](rows * c.words), halfs: blockSlice[uint16](rows * c.halfs)}
}

// bytes is the storage of one row.
func (c rowCodec) bytes() int { return 4*c.words + 2*c.halfs }

// put encodes src (dim values) into row r of s.
func (c rowCodec) put(s seg, r int, src []float32) {
	h := s.halfs[r*c.halfs : (r+1)*c.halfs]
	switch c.f.Mode {
	case F16:
		for j, x := range src[:c.dim] {
			h[j] = half.F32ToF16(x)
		}
	case Affine:
		var buf [2 * maxGroups]float32
		sc, bi := buf[:c.groups], buf[maxGroups:maxGroups+c.groups]
		quant.QuantizeRow(s.codes[r*c.words:(r+1)*c.words], sc, bi, src[:c.dim], c.f.Bits, c.f.Group)
		for g := range sc {
			h[2*g], h[2*g+1] = half.F32ToF16(sc[g]), half.F32ToF16(bi[g])
		}
	case Q4_0:
		putQ4_0(s.codes[r*c.words:(r+1)*c.words], h, src[:c.dim])
	}
}

// get decodes row r of s into dst (dim values).
func (c rowCodec) get(dst []float32, s seg, r int) {
	h := s.halfs[r*c.halfs : (r+1)*c.halfs]
	dst = dst[:c.dim]
	switch c.f.Mode {
	case F16:
		quant.WidenF16(dst, h)
	case Affine:
		// quant.DequantizeRow's arithmetic (scale*code + bias, rounded after each), with
		// the codes unpacked straight into dst: this runs once per cached position per
		// head in every attention call, so 4- and 8-bit rows take the SIMD kernels and
		// 6-bit rows an unrolled unpack.
		codes := s.codes[r*c.words : (r+1)*c.words]
		if dequantFast(dst, codes, h, c.f.Bits, c.f.Group) {
			return
		}
		if c.f.Bits == 6 && c.f.Group%16 == 0 {
			dequant6(dst, codes, h, c.f.Group)
			return
		}
		quant.Codes(dst, codes, 0, c.f.Bits)
		g := c.f.Group
		for i := 0; i < c.groups; i++ {
			sc, bi := half.F16ToF32(h[2*i]), half.F16ToF32(h[2*i+1])
			d := dst[i*g : (i+1)*g]
			for j, q := range d {
				d[j] = sc*q + bi
			}
		}
	case Q4_0:
		codes := s.codes[r*c.words : (r+1)*c.words]
		if dequantQ40Fast(dst, codes, h) {
			return
		}
		quant.Codes(dst, codes, 0, 4)
		for g, d := range h {
			df := half.F16ToF32(d)
			for j := g * 32; j < (g+1)*32; j++ {
				dst[j] = df * (dst[j] - 8)
			}
		}
	}
}

// copyRow copies row sr of src to row dr of dst, both in c's format.
func (c rowCodec) copyRow(dst seg, dr int, src seg, sr int) {
	copy(dst.codes[dr*c.words:(dr+1)*c.words], src.codes[sr*c.words:(sr+1)*c.words])
	copy(dst.halfs[dr*c.halfs:(dr+1)*c.halfs], src.halfs[sr*c.halfs:(sr+1)*c.halfs])
}

// maxGroups bounds the groups of one row: head_dim up to 1024 in groups of 32.
const maxGroups = 32

// maxHeadDim is the largest head dimension a quantized cache accepts (maxGroups groups of 32).
const maxHeadDim = 32 * maxGroups

// putQ4_0 quantizes src as llama.cpp's q4_0: per block of 32, d = m/-8 where m is the
// element of largest magnitude (sign kept), codes round(x/d)+8 clamped to 0..15, so the
// extreme element is exactly -8·d and zero is exact.
func putQ4_0(codes []uint32, scales []uint16, src []float32) {
	clear(codes)
	for g := range scales {
		blk := src[g*32 : (g+1)*32]
		var m float32
		for _, x := range blk {
			if abs(x) > abs(m) {
				m = x
			}
		}
		d := m / -8
		dh := half.F32ToF16(d)
		scales[g] = dh
		var id float32
		if dr := half.F16ToF32(dh); dr != 0 {
			id = 1 / dr // encode against the stored (fp16-rounded) scale
		}
		for j, x := range blk {
			q := uint32(min(15, max(0, x*id+8.5))) // float32 and truncation, as llama.cpp
			i := g*32 + j
			codes[i/8] |= q << (4 * uint(i%8))
		}
	}
}

func abs(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }
