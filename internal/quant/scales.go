package quant

import (
	"fmt"
	"math"
	"unsafe"
)

// ScaleType is how a packed matrix's per-group scales and biases are stored.
type ScaleType uint8

// The stored forms of scales and biases: MLX writes them in the weights' float dtype.
const (
	ScaleF32  ScaleType = iota // float32
	ScaleBF16                  // bfloat16 bits
	ScaleF16                   // IEEE half bits
)

// Scales are a packed matrix's per-group scales (or biases) as the checkpoint stores them:
// float32 values, or bf16 or fp16 bits read in place from the checkpoint's mapping, so that
// no float32 copy of them is held (for a 4-bit model with bf16 scales, that copy would be
// 12% of the weights' size).
type Scales struct {
	F32  []float32 // Type ScaleF32
	Bits []uint16  // Type ScaleBF16 or ScaleF16
	Type ScaleType
}

func (st ScaleType) String() string {
	switch st {
	case ScaleF32:
		return "float32"
	case ScaleBF16:
		return "bf16"
	case ScaleF16:
		return "fp16"
	}
	return fmt.Sprintf("ScaleType(%d)", uint8(st))
}

// F32Scales wraps float32 scales or biases.
func F32Scales(v []float32) Scales { return Scales{F32: v} }

// HalfScales wraps 16-bit scales or biases (t is ScaleBF16 or ScaleF16).
func HalfScales(bits []uint16, t ScaleType) Scales { return Scales{Bits: bits, Type: t} }

// Len is the number of values.
func (s Scales) Len() int {
	if s.Type == ScaleF32 {
		return len(s.F32)
	}
	return len(s.Bits)
}

// Slice returns values lo .. hi-1, sharing memory.
func (s Scales) Slice(lo, hi int) Scales {
	if s.Type == ScaleF32 {
		return Scales{F32: s.F32[lo:hi]}
	}
	return Scales{Bits: s.Bits[lo:hi], Type: s.Type}
}

// At returns value i as float32 (exact: every bf16 and fp16 value is a float32).
func (s Scales) At(i int) float32 {
	switch s.Type {
	case ScaleBF16:
		return math.Float32frombits(uint32(s.Bits[i]) << 16)
	case ScaleF16:
		return f16(s.Bits[i])
	}
	return s.F32[i]
}

// Bytes is the memory the values take.
func (s Scales) Bytes() int64 { return int64(len(s.F32))*4 + int64(len(s.Bits))*2 }

// ptr is the address of value 0 for the assembly kernels (the caller checked Len() > 0).
func (s Scales) ptr() unsafe.Pointer {
	if s.Type == ScaleF32 {
		return unsafe.Pointer(&s.F32[0])
	}
	return unsafe.Pointer(&s.Bits[0])
}

// widen writes values lo .. lo+len(dst)-1 into dst as float32.
func (s Scales) widen(dst []float32, lo int) {
	if s.Type == ScaleF32 {
		copy(dst, s.F32[lo:])
		return
	}
	for i := range dst {
		dst[i] = s.At(lo + i)
	}
}

// DequantizeRowStored is DequantizeRow with scales and biases in their stored form.
func DequantizeRowStored(dst []float32, packed []uint32, scales, biases Scales, bits, group int) {
	groups := len(dst) / group
	if groups == 0 {
		return
	}
	checkLen(scales, biases, groups)
	if simd && (bits == 4 || bits == 8) {
		_ = packed[Words(len(dst), bits)-1]
		if bits == 4 {
			dequantQ4(&dst[0], &packed[0], scales.ptr(), biases.ptr(), groups, group/16, int(scales.Type))
		} else {
			dequantQ8(&dst[0], &packed[0], scales.ptr(), biases.ptr(), groups, group/8, int(scales.Type))
		}
		return
	}
	var codes [128]float32
	for g := 0; g < groups; g++ {
		c := codes[:group]
		Codes(c, packed, g*group, bits)
		s, b := scales.At(g), biases.At(g)
		out := dst[g*group : (g+1)*group]
		for j, q := range c {
			out[j] = s*q + b
		}
	}
}

// DotRowsStored is DotRows with scales and biases in their stored form (both of one type).
//
// Invariant (batched decoding relies on it): the result for a row depends only on that row,
// its scales and biases and the prepared vector, never on how many rows the call covers or
// where the row sits among them; each kernel (plain Go, AVX2) computes a row with one fixed
// sequence of float32 operations. So a row gives bit-identical results alone or in any
// batch of rows or vectors, on one machine and one kernel selection. TestDecodeKernels
// checks it.
func (v *Vec) DotRowsStored(out []float32, packed []uint32, scales, biases Scales) {
	rows, groups := len(out), len(v.x)/v.group
	if rows == 0 || groups == 0 {
		clear(out)
		return
	}
	wpr := Words(len(v.x), v.bits)
	_ = packed[rows*wpr-1]
	checkLen(scales, biases, rows*groups)
	switch {
	case decodeOn() && v.bits == 4 && v.lanes > 0:
		dotQ4Rows(&v.perm[0], &packed[0], scales.ptr(), biases.ptr(), &v.sums[0], &out[0], rows, len(v.x), v.group, v.lanes, scales.Type)
	case decodeOn() && v.bits == 8 && v.lanes > 0:
		dotQ8Rows(&v.perm[0], &packed[0], scales.ptr(), biases.ptr(), &v.sums[0], &out[0], rows, len(v.x), v.group, v.lanes, scales.Type)
	case scales.Type == ScaleF32:
		for r := range out {
			out[r] = DotRow(v.x, v.sums, packed[r*wpr:(r+1)*wpr], scales.F32[r*groups:(r+1)*groups], biases.F32[r*groups:(r+1)*groups], v.bits, v.group)
		}
	default:
		// A row's 16-bit scales and biases widened into a small buffer, then the plain kernel.
		var buf [512]float32
		sb := buf[:]
		if 2*groups > len(buf) {
			sb = make([]float32, 2*groups)
		}
		s, b := sb[:groups], sb[groups:2*groups]
		for r := range out {
			scales.widen(s, r*groups)
			biases.widen(b, r*groups)
			out[r] = DotRow(v.x, v.sums, packed[r*wpr:(r+1)*wpr], s, b, v.bits, v.group)
		}
	}
}

// checkLen panics unless scales and biases hold at least n values each: the bounds check
// of the assembly kernels, made on the lengths (reading the last value instead, as a plain
// bounds check would, costs a cache miss per call in a decode step).
func checkLen(scales, biases Scales, n int) {
	if scales.Len() < n || biases.Len() < n || scales.Type != biases.Type {
		panic(fmt.Sprintf("quant: %d scales (%v) and %d biases (%v) for %d groups: too few, or of two types", scales.Len(), scales.Type, biases.Len(), biases.Type, n))
	}
}
