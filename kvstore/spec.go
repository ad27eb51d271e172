package kvstore

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/mlxg/mlxg/internal/quant"
)

// Mode is how one of a layer's K or V tensors is stored.
type Mode uint8

// The storage modes.
const (
	// F16 is unquantized fp16.
	F16 Mode = iota
	// Affine is MLX's affine quantization along head_dim (internal/quant's layout): per group,
	// x = scale*code + bias, with an fp16 scale and bias.
	Affine
	// Q4_0 is llama.cpp's q4_0 class: blocks of 32 elements, one fp16 scale d, 4-bit codes
	// centred on 8 (x = d*(code-8)), 4.5 bits per element.
	Q4_0
)

// Format is the storage of one of K or V: a mode, its bits and group size.
type Format struct {
	Mode  Mode
	Bits  int // 16 for F16; 2, 3, 4, 5, 6 or 8 for Affine; 4 for Q4_0
	Group int // elements per scale: 32, 64 or 128 for Affine, 32 for Q4_0, 0 for F16
}

// The fixed formats.
var (
	FormatF16  = Format{Mode: F16, Bits: 16}
	FormatQ4_0 = Format{Mode: Q4_0, Bits: 4, Group: 32}
)

// AffineFormat is MLX affine quantization with bits and group.
func AffineFormat(bits, group int) Format { return Format{Mode: Affine, Bits: bits, Group: group} }

// Quantized reports whether f is not fp16.
func (f Format) Quantized() bool { return f.Mode != F16 }

// Validate checks f for a head dimension.
func (f Format) Validate(headDim int) error {
	switch f.Mode {
	case F16:
		if f.Bits != 16 {
			return fmt.Errorf("kvstore: fp16 format with %d bits", f.Bits)
		}
		return nil
	case Q4_0:
		if f.Bits != 4 || f.Group != 32 {
			return fmt.Errorf("kvstore: q4_0 is 4 bits in groups of 32, not %d bits in groups of %d", f.Bits, f.Group)
		}
	case Affine:
		if err := quant.CheckAffine(f.Bits, f.Group); err != nil {
			return fmt.Errorf("kvstore: %w", err)
		}
	default:
		return fmt.Errorf("kvstore: unknown storage mode %d", f.Mode)
	}
	if headDim%f.Group != 0 {
		return fmt.Errorf("kvstore: head_dim %d is not a multiple of the KV group size %d: choose a group size that divides it (32 always does for head_dim 64, 128, 256)", headDim, f.Group)
	}
	return nil
}

// RowBytes is the storage of one head's vector of headDim elements: codes plus, per
// group, an fp16 scale (and an fp16 bias for Affine).
func (f Format) RowBytes(headDim int) int {
	switch f.Mode {
	case Affine:
		return headDim*f.Bits/8 + headDim/f.Group*4
	case Q4_0:
		return headDim/2 + headDim/32*2
	}
	return headDim * 2
}

// BitsPerElement is the format's density including scales and biases.
func (f Format) BitsPerElement() float64 {
	switch f.Mode {
	case Affine:
		return float64(f.Bits) + 32/float64(f.Group)
	case Q4_0:
		return 4.5
	}
	return 16
}

// bitsLabel is how a format's bits are spelled in flags and in Spec.String: "8", "16", "q4_0".
func (f Format) bitsLabel() string {
	switch f.Mode {
	case F16:
		return "16"
	case Q4_0:
		return "q4_0"
	}
	return strconv.Itoa(f.Bits)
}

func (f Format) String() string {
	switch f.Mode {
	case F16:
		return "fp16"
	case Q4_0:
		return "q4_0"
	}
	return fmt.Sprintf("%d-bit g%d", f.Bits, f.Group)
}

// Spec is one attention layer's cache storage: keys and values separately, since keys
// (in q·k) need more precision than values (averaged by the softmax weights).
type Spec struct {
	K, V Format
}

// SpecF16 is the unquantized cache.
var SpecF16 = Spec{K: FormatF16, V: FormatF16}

// Quantized reports whether K or V is quantized.
func (s Spec) Quantized() bool { return s.K.Quantized() || s.V.Quantized() }

// Validate checks s for the layer's key and value head dimensions.
func (s Spec) Validate(kHeadDim, vHeadDim int) error {
	if err := s.K.Validate(kHeadDim); err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	if err := s.V.Validate(vHeadDim); err != nil {
		return fmt.Errorf("values: %w", err)
	}
	return nil
}

// TokenBytes is the cache storage of one token in one layer with kvHeads heads.
func (s Spec) TokenBytes(kvHeads, kHeadDim, vHeadDim int) int {
	return kvHeads * (s.K.RowBytes(kHeadDim) + s.V.RowBytes(vHeadDim))
}

// String spells the spec as `mlxg ps` shows it: "fp16", "q4_0", "K8/V4 g64/32", "K8/V8 g64".
func (s Spec) String() string {
	switch {
	case s == SpecF16:
		return "fp16"
	case s.K == FormatQ4_0 && s.V == FormatQ4_0:
		return "q4_0"
	}
	var groups []string
	for _, f := range []Format{s.K, s.V} {
		if f.Mode == Affine {
			groups = append(groups, strconv.Itoa(f.Group))
		}
	}
	if len(groups) == 2 && groups[0] == groups[1] {
		groups = groups[:1]
	}
	out := "K" + s.K.bitsLabel() + "/V" + s.V.bitsLabel()
	if len(groups) > 0 {
		out += " g" + strings.Join(groups, "/")
	}
	return out
}
