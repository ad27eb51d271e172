package kvstore

import "fmt"

// Describing a layer cache as a few integers, so that another process (a pipeline
// rank holding some of a model's layers) can make an empty cache of the same kind and
// spec for them: Describe on the rank that planned the caches, NewDescribed there.

// DescLen is the length of one layer's description.
const DescLen = 12

// The kinds a description names.
const (
	descNone      = 0 // not a KV cache of this package (a recurrent state, say)
	descFull      = 1
	descFullFP32  = 2
	descQuantized = 3
	descRotating  = 4
)

// descRotated marks a rotated format in a description's mode.
const descRotated = 1 << 8

func descMode(f Format) int32 {
	m := int32(f.Mode)
	if f.Rotated {
		m |= descRotated
	}
	return m
}

// Describe returns c's description: its kind, dims, target spec, quantized_kv_start
// and window (a Rotating's, or a Full's from NewFullWindow). A layer of another kind describes as none.
func Describe(c Layer) []int32 {
	d := make([]int32, DescLen)
	var q *kvCodecs
	switch c := c.(type) {
	case *Full:
		d[0] = descFull
		if c.fp32 {
			d[0] = descFullFP32
		}
		d[1], d[2], d[3] = int32(c.kvHeads), int32(c.kDim), int32(c.vDim)
		d[11] = int32(c.window) // NewFullWindow's: every position kept, the window attended
		return d
	case *Quantized:
		d[0], q = descQuantized, &c.kvCodecs
	case *Rotating:
		d[0], q = descRotating, &c.kvCodecs
		d[11] = int32(c.window)
	default:
		return d
	}
	d[1], d[2], d[3] = int32(q.kvHeads), int32(q.kDim), int32(q.vDim)
	d[4], d[5], d[6] = descMode(q.spec.K), int32(q.spec.K.Bits), int32(q.spec.K.Group)
	d[7], d[8], d[9] = descMode(q.spec.V), int32(q.spec.V.Bits), int32(q.spec.V.Group)
	d[10] = int32(q.start)
	return d
}

// NewDescribed makes an empty cache as d describes; nil for a description of none.
func NewDescribed(d []int32) (Layer, error) {
	if len(d) != DescLen {
		return nil, fmt.Errorf("kvstore: a cache description of %d values, want %d", len(d), DescLen)
	}
	heads, kd, vd := int(d[1]), int(d[2]), int(d[3])
	spec := Spec{K: Format{Mode: Mode(d[4] &^ descRotated), Bits: int(d[5]), Group: int(d[6]), Rotated: d[4]&descRotated != 0},
		V: Format{Mode: Mode(d[7] &^ descRotated), Bits: int(d[8]), Group: int(d[9]), Rotated: d[7]&descRotated != 0}}
	switch d[0] {
	case descNone:
		return nil, nil
	case descFull, descFullFP32:
		if d[11] > 0 {
			return NewFullWindow(heads, kd, vd, d[0] == descFullFP32, int(d[11]))
		}
		return NewFull(heads, kd, vd, d[0] == descFullFP32)
	case descQuantized:
		return NewQuantized(heads, kd, vd, spec, int(d[10]))
	case descRotating:
		return NewRotating(heads, kd, vd, int(d[11]), spec, int(d[10]))
	}
	return nil, fmt.Errorf("kvstore: unknown cache kind %d in a description", d[0])
}
