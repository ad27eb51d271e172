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

// Format is the storage of one of K or V: a mode, its bits and group size, and whether
// each head's vector is stored Hadamard-rotated.
type Format struct {
	Mode  Mode
	Bits  int // 16 for F16; 2, 3, 4, 5, 6 or 8 for Affine; 4 for Q4_0
	Group int // elements per scale: 16, 32, 64 or 128 for Affine, 32 for Q4_0, 0 for F16
	// Rotated stores H·x instead of x, H the normalized Walsh–Hadamard transform of the
	// head dimension (a power of two): an orthogonal rotation that spreads an outlier
	// channel over the whole vector, so that a group's scale is not set by one element.
	// Attention folds it in (q·k = (Hq)·(Hk); the output over rotated values is rotated
	// back once per query row), so the cache is never rotated back.
	Rotated bool `json:",omitempty"`
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

// Rotate returns f with its Rotated flag set to r.
func (f Format) Rotate(r bool) Format {
	f.Rotated = r
	return f
}

// minKVGroup is the smallest affine group of the KV cache. MLX's own quantization stops
// at 32; a cache row's groups of 16 halve the error of 4-bit values at 2 more bits per
// element, and the MLX backend dequantizes them itself (metal/attend.go).
const minKVGroup = 16

// RotationError says why vectors of headDim elements cannot be stored rotated, nil when they can.
func RotationError(headDim int) error {
	if headDim <= 0 || headDim&(headDim-1) != 0 {
		return fmt.Errorf("kvstore: Hadamard rotation needs a power-of-two head_dim, not %d", headDim)
	}
	return nil
}

// Validate checks f for a head dimension.
func (f Format) Validate(headDim int) error {
	switch f.Mode {
	case F16:
		if f.Bits != 16 {
			return fmt.Errorf("kvstore: fp16 format with %d bits", f.Bits)
		}
	case Q4_0:
		if f.Bits != 4 || f.Group != 32 {
			return fmt.Errorf("kvstore: q4_0 is 4 bits in groups of 32, not %d bits in groups of %d", f.Bits, f.Group)
		}
	case Affine:
		group := f.Group
		if group == minKVGroup {
			group = 32 // bits are checked alike; a group of 16 is the cache's own
		}
		if err := quant.CheckAffine(f.Bits, group); err != nil {
			return fmt.Errorf("kvstore: %w", err)
		}
		if f.Group == minKVGroup && headDim/f.Group > maxGroups {
			return fmt.Errorf("kvstore: head_dim %d in groups of %d is more than %d groups a row: use a group of 32 or more", headDim, f.Group, maxGroups)
		}
	default:
		return fmt.Errorf("kvstore: unknown storage mode %d", f.Mode)
	}
	if f.Group > 0 && headDim%f.Group != 0 {
		return fmt.Errorf("kvstore: head_dim %d is not a multiple of the KV group size %d: choose a group size that divides it (32 always does for head_dim 64, 128, 256)", headDim, f.Group)
	}
	if f.Rotated {
		return RotationError(headDim)
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

// rotatedSuffix marks a Hadamard-rotated format in flags and spec strings: "4h", "q4_0h".
const rotatedSuffix = "h"

// bitsLabel is how a format's bits are spelled in flags and in Spec.String: "8", "16",
// "q4_0", and "4h" rotated.
func (f Format) bitsLabel() string {
	out := strconv.Itoa(f.Bits)
	switch f.Mode {
	case F16:
		out = "16"
	case Q4_0:
		out = "q4_0"
	}
	if f.Rotated {
		out += rotatedSuffix
	}
	return out
}

func (f Format) String() string {
	out := fmt.Sprintf("%d-bit g%d", f.Bits, f.Group)
	switch f.Mode {
	case F16:
		out = "fp16"
	case Q4_0:
		out = "q4_0"
	}
	if f.Rotated {
		out += " rotated"
	}
	return out
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

// String spells the spec as `mlxg ps` shows it: "fp16", "q4_0", "K8/V4 g64/32", "K8/V8 g64",
// and with rotated keys or values "K8/V4h g64/32", "q4_0h".
func (s Spec) String() string {
	switch {
	case s == SpecF16:
		return "fp16"
	case s.K == FormatQ4_0 && s.V == FormatQ4_0:
		return "q4_0"
	case s.K == FormatQ4_0.Rotate(true) && s.V == FormatQ4_0.Rotate(true):
		return "q4_0" + rotatedSuffix
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
