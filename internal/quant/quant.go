// Package quant implements MLX's quantization formats in Go (plain Go, plus assembly fast
// paths on amd64). It is the single source of truth for the bit layout used by the weights
// (runner), by `mlxg create` (packing) and by the quantized KV cache (kvstore, codes along
// head_dim).
//
// Supported:
//   - affine mode (w = scale*q + bias per group of Group consecutive elements along a row),
//     bits 2, 3, 4, 5, 6, 8 and group sizes 32, 64, 128: Quantize, Dequantize, the
//     row-level QuantizeRow, DequantizeRow, DotRow that kernels call, and Vec, an input
//     vector prepared for many dot products with packed rows (assembly for 4 and 8 bits:
//     AVX-512 or AVX2+FMA on amd64, chosen at run time, NEON on arm64; plain Go elsewhere;
//     see dotq_amd64.s for the scheme and DotRowsStored for the batching invariant);
//   - the float kernels the CPU backend's matrix products and the KV cache's attention
//     share (DotRows4, DotRows4x2, AxpyRows4), in assembly on amd64 as well;
//   - decoding of the scale-only float modes mxfp4 (e2m1 codes, e8m0 scale, group 32),
//     mxfp8 (e4m3 codes, e8m0 scale, group 32) and nvfp4 (e2m1 codes, e4m3 scale,
//     group 16, without the optional global scale): DequantizeFP.
//
// Layout (MLX mlx/backend/cpu/quantized.cpp and mlx/ops.cpp): a row of Cols codes is a
// little-endian bit stream packed into uint32 words, code i occupying bits
// [i*bits, (i+1)*bits) of the stream, least significant bit first. For 2, 4 and 8 bits
// this is "code k of a word at bits k*bits"; for 3, 5 and 6 bits codes straddle bytes
// (8 codes in 3 or 5 bytes, 4 six-bit codes in 3 bytes) and words. A row therefore takes
// Cols*bits/32 words, and scales and biases hold Cols/Group values per row.
//
// The affine quantizer follows MLX's CPU kernel exactly: per group, scale =
// max((max-min)/(2^bits-1), 1e-7) signed towards the edge of larger magnitude, the edge
// value made exactly representable (bias = edge, scale = edge/round(edge/scale)), codes
// rint((w-bias)/scale) clamped to [0, 2^bits-1], all in float32. MLX's Metal kernel differs
// only in rounding ties away from zero and in never letting a group's max fall below 0.
// Scales and biases are returned as float32; a checkpoint stores them in the weights'
// dtype (fp16/bf16), rounded after the codes were computed, as MLX does.
package quant

import (
	"fmt"
	"math"
)

// Mode is a quantization mode as config.json's "quantization" block spells it.
type Mode string

// The modes MLX defines.
const (
	Affine Mode = "affine"
	MXFP4  Mode = "mxfp4"
	MXFP8  Mode = "mxfp8"
	NVFP4  Mode = "nvfp4"
)

// CheckAffine reports whether bits and group are a supported affine combination.
func CheckAffine(bits, group int) error {
	switch bits {
	case 2, 3, 4, 5, 6, 8:
	default:
		return fmt.Errorf("quant: %d-bit affine quantization is not supported (use 2, 3, 4, 5, 6 or 8)", bits)
	}
	switch group {
	case 32, 64, 128:
	default:
		return fmt.Errorf("quant: group size %d is not supported (use 32, 64 or 128)", group)
	}
	return nil
}

// CheckShape reports whether a rows×cols matrix can be quantized with bits and group.
func CheckShape(rows, cols, bits, group int) error {
	if err := CheckAffine(bits, group); err != nil {
		return err
	}
	if rows < 0 || cols <= 0 || cols%group != 0 {
		return fmt.Errorf("quant: a %d×%d matrix cannot be quantized in groups of %d: the row length must be a positive multiple of the group size", rows, cols, group)
	}
	return nil
}

// Words returns the number of uint32 words that hold one row of cols codes of bits each.
func Words(cols, bits int) int { return cols * bits / 32 }

// Quantize quantizes a row-major rows×cols matrix in MLX's affine format.
// It returns rows*Words(cols,bits) packed words and rows*cols/group scales and biases.
func Quantize(w []float32, rows, cols, bits, group int) (packed []uint32, scales, biases []float32, err error) {
	if err := CheckShape(rows, cols, bits, group); err != nil {
		return nil, nil, nil, err
	}
	if len(w) != rows*cols {
		return nil, nil, nil, fmt.Errorf("quant: Quantize got %d values for a %d×%d matrix", len(w), rows, cols)
	}
	wpr, gpr := Words(cols, bits), cols/group
	packed = make([]uint32, rows*wpr)
	scales = make([]float32, rows*gpr)
	biases = make([]float32, rows*gpr)
	for r := 0; r < rows; r++ {
		QuantizeRow(packed[r*wpr:(r+1)*wpr], scales[r*gpr:(r+1)*gpr], biases[r*gpr:(r+1)*gpr], w[r*cols:(r+1)*cols], bits, group)
	}
	return packed, scales, biases, nil
}

// QuantizeRow quantizes one row src (a multiple of group long) into dst
// (Words(len(src),bits) words, overwritten), scales and biases (len(src)/group each).
// The caller has validated bits and group with CheckAffine.
func QuantizeRow(dst []uint32, scales, biases, src []float32, bits, group int) {
	nBins := float32(int(1)<<bits - 1)
	const eps = 1e-7
	clear(dst)
	for g := 0; g*group < len(src); g++ {
		vals := src[g*group : (g+1)*group]
		wmin, wmax := float32(math.Inf(1)), float32(math.Inf(-1))
		for _, v := range vals {
			wmin = min(wmin, v)
			wmax = max(wmax, v)
		}
		mask := abs32(wmin) > abs32(wmax)
		scale := max((wmax-wmin)/nBins, eps)
		edge := wmax
		if mask {
			edge = wmin
		} else {
			scale = -scale
		}
		var bias float32
		if q0 := rint(edge / scale); q0 != 0 {
			scale = edge / q0
			bias = edge
		}
		scales[g], biases[g] = scale, bias
		for j, v := range vals {
			q := min(max(rint((v-bias)/scale), 0), nBins)
			putCode(dst, g*group+j, bits, uint32(q))
		}
	}
}

// Dequantize expands an affine-quantized rows×cols matrix to float32.
func Dequantize(packed []uint32, scales, biases []float32, rows, cols, bits, group int) ([]float32, error) {
	if err := CheckShape(rows, cols, bits, group); err != nil {
		return nil, err
	}
	wpr, gpr := Words(cols, bits), cols/group
	if len(packed) != rows*wpr || len(scales) != rows*gpr || len(biases) != rows*gpr {
		return nil, fmt.Errorf("quant: Dequantize of a %d×%d %d-bit group-%d matrix needs %d words, %d scales and %d biases; got %d, %d and %d",
			rows, cols, bits, group, rows*wpr, rows*gpr, rows*gpr, len(packed), len(scales), len(biases))
	}
	out := make([]float32, rows*cols)
	for r := 0; r < rows; r++ {
		DequantizeRow(out[r*cols:(r+1)*cols], packed[r*wpr:(r+1)*wpr], scales[r*gpr:(r+1)*gpr], biases[r*gpr:(r+1)*gpr], bits, group)
	}
	return out, nil
}

// DequantizeRow expands one packed row into dst (len(dst) codes).
func DequantizeRow(dst []float32, packed []uint32, scales, biases []float32, bits, group int) {
	DequantizeRowStored(dst, packed, F32Scales(scales), F32Scales(biases), bits, group)
}

// Code returns code i of a packed row.
func Code(packed []uint32, i, bits int) uint32 {
	pos := i * bits
	w, off := pos>>5, uint(pos&31)
	v := packed[w] >> off
	if off+uint(bits) > 32 {
		v |= packed[w+1] << (32 - off)
	}
	return v & (1<<uint(bits) - 1)
}

// Codes writes codes start .. start+len(dst)-1 of a packed row into dst as float32.
// start and len(dst) are multiples of 32, so every run begins on a word boundary.
func Codes(dst []float32, packed []uint32, start, bits int) {
	switch bits {
	case 4:
		ws := packed[start/8 : (start+len(dst))/8]
		for k, w := range ws {
			d := dst[k*8 : k*8+8 : k*8+8]
			d[0] = float32(w & 15)
			d[1] = float32(w >> 4 & 15)
			d[2] = float32(w >> 8 & 15)
			d[3] = float32(w >> 12 & 15)
			d[4] = float32(w >> 16 & 15)
			d[5] = float32(w >> 20 & 15)
			d[6] = float32(w >> 24 & 15)
			d[7] = float32(w >> 28)
		}
	case 8:
		ws := packed[start/4 : (start+len(dst))/4]
		for k, w := range ws {
			d := dst[k*4 : k*4+4 : k*4+4]
			d[0] = float32(w & 255)
			d[1] = float32(w >> 8 & 255)
			d[2] = float32(w >> 16 & 255)
			d[3] = float32(w >> 24)
		}
	case 2:
		ws := packed[start/16 : (start+len(dst))/16]
		for k, w := range ws {
			d := dst[k*16 : k*16+16 : k*16+16]
			for j := range d {
				d[j] = float32(w >> (2 * uint(j)) & 3)
			}
		}
	default:
		// 3, 5, 6 bits: 32 codes fill exactly `bits` words; read them as one bit stream.
		mask := uint64(1)<<uint(bits) - 1
		for base := 0; base < len(dst); base += 32 {
			ws := packed[(start+base)*bits/32 : (start+base+32)*bits/32]
			var acc uint64
			have, wi := uint(0), 0
			for j := 0; j < 32; j++ {
				if have < uint(bits) {
					acc |= uint64(ws[wi]) << have
					wi++
					have += 32
				}
				dst[base+j] = float32(acc & mask)
				acc >>= uint(bits)
				have -= uint(bits)
			}
		}
	}
}

// DotRow returns x · dequantize(row): sum over groups of scale*Σ x·q + bias*Σ x.
// xsum holds Σ x per group (GroupSums), computed once per input vector and reused
// across every row, so the inner loop is one multiply-add per code.
func DotRow(x, xsum []float32, packed []uint32, scales, biases []float32, bits, group int) float32 {
	var total float32
	switch bits {
	case 4:
		wpg := group / 8
		for g := range scales {
			ws := packed[g*wpg : (g+1)*wpg]
			xg := x[g*group : (g+1)*group]
			var acc float32
			for k, w := range ws {
				xs := xg[k*8 : k*8+8 : k*8+8]
				acc += xs[0]*float32(w&15) + xs[1]*float32(w>>4&15) +
					xs[2]*float32(w>>8&15) + xs[3]*float32(w>>12&15) +
					xs[4]*float32(w>>16&15) + xs[5]*float32(w>>20&15) +
					xs[6]*float32(w>>24&15) + xs[7]*float32(w>>28)
			}
			total += scales[g]*acc + biases[g]*xsum[g]
		}
	case 8:
		wpg := group / 4
		for g := range scales {
			ws := packed[g*wpg : (g+1)*wpg]
			xg := x[g*group : (g+1)*group]
			var acc float32
			for k, w := range ws {
				xs := xg[k*4 : k*4+4 : k*4+4]
				acc += xs[0]*float32(w&255) + xs[1]*float32(w>>8&255) +
					xs[2]*float32(w>>16&255) + xs[3]*float32(w>>24)
			}
			total += scales[g]*acc + biases[g]*xsum[g]
		}
	default:
		var codes [128]float32
		for g := range scales {
			c := codes[:group]
			Codes(c, packed, g*group, bits)
			xg := x[g*group : (g+1)*group]
			var acc float32
			for j, q := range c {
				acc += xg[j] * q
			}
			total += scales[g]*acc + biases[g]*xsum[g]
		}
	}
	return total
}

// GroupSums writes Σ x over each group of x into dst (len(x)/group values).
func GroupSums(dst, x []float32, group int) {
	for g := range dst {
		var s float32
		for _, v := range x[g*group : (g+1)*group] {
			s += v
		}
		dst[g] = s
	}
}

func putCode(dst []uint32, i, bits int, q uint32) {
	pos := i * bits
	w, off := pos>>5, uint(pos&31)
	dst[w] |= q << off
	if off+uint(bits) > 32 {
		dst[w+1] |= q >> (32 - off)
	}
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// rint rounds half to even, as C's rint in the default rounding mode.
func rint(x float32) float32 { return float32(math.RoundToEven(float64(x))) }
