package kvstore

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// LayerKind is what one layer of a model keeps between tokens.
type LayerKind uint8

// The layer kinds.
const (
	// LayerNone keeps nothing (a layer without attention, or one that reads another's KV).
	LayerNone LayerKind = iota
	// LayerFull is full attention: one K and V row per head per token, growing.
	LayerFull
	// LayerSliding is sliding-window attention: the last Window tokens, in a rotating buffer.
	LayerSliding
	// LayerRecurrent is a linear-attention or state-space layer of a hybrid model: a
	// fixed-size state, no per-token KV.
	LayerRecurrent
	// LayerLatent is multi-head latent attention (DeepSeek-V2/V3, GLM-4.7-Flash): per token
	// the compressed latent and the shared rotary key, stored as one KV head whose keys are
	// the rotary part (KHeadDim) and whose values are the latent (VHeadDim); growing, and
	// kept whole under MaxKVSize (latent.go).
	LayerLatent
)

func (k LayerKind) String() string {
	switch k {
	case LayerNone:
		return "none"
	case LayerFull:
		return "full"
	case LayerSliding:
		return "sliding"
	case LayerRecurrent:
		return "recurrent"
	case LayerLatent:
		return "latent"
	}
	return fmt.Sprintf("LayerKind(%d)", uint8(k))
}

// HasKV reports whether the layer keeps per-token keys and values.
func (k LayerKind) HasKV() bool { return k == LayerFull || k == LayerSliding || k == LayerLatent }

// LayerShape is the cache-relevant shape of one layer.
type LayerShape struct {
	Kind     LayerKind
	KVHeads  int
	KHeadDim int
	VHeadDim int
	Window   int   // LayerSliding: tokens kept
	State    int64 // LayerRecurrent: bytes of state per sequence
}

// ModelShape is what the policy needs to know of a checkpoint.
type ModelShape struct {
	Layers      []LayerShape
	WeightBytes int64 // tensor bytes of the checkpoint, as loaded
	MaxContext  int   // max_position_embeddings; 0 when unknown
	// KVBefore and KVAfter count the KV layers of the whole model outside this shape, when
	// it is one machine's share of a model split over several (its other layers LayerNone):
	// boundary layers are the whole model's first and last, wherever they live.
	KVBefore, KVAfter int
	// Streamed: the weights are a model's in streaming mode (WeightBytes its pinned weights,
	// or its budget), which take whatever memory the plan leaves. Overhead, when positive,
	// is a pass's activations and scratch measured for it, in place of the policy's estimate,
	// and under a memory cgroup's limit the reserve is the small one of a process that has
	// the limit to itself (streamReserve).
	Streamed bool
	Overhead int64
	// Vision is what a vision tower's images add beside the weights (its tower's weights are in
	// WeightBytes): the peak of encoding the largest image and the encoded features kept.
	Vision int64
}

// KVLayers returns the indices of the layers that keep per-token KV.
func (m ModelShape) KVLayers() []int {
	var out []int
	for i, l := range m.Layers {
		if l.Kind.HasKV() {
			out = append(out, i)
		}
	}
	return out
}

// Layout is the cache storage of every layer of a model for one sequence.
type Layout struct {
	Base             Spec   // the spec of the inner KV layers
	Boundary         Spec   // the spec of the first and last BoundaryLayers KV layers
	BoundaryLayers   int    // counted over KV layers, not over all layers
	QuantizedKVStart int    // the cache stays fp16 until this many tokens, then converts
	MaxKVSize        int    // >0: full-attention layers keep only the last MaxKVSize tokens
	Specs            []Spec // per model layer; the zero Spec for layers without KV
	KVLayerCount     int
	// F16Layers counts the KV layers the policy kept fp16 because no KV group size
	// (32, 64, 128) divides their head_dim; F16HeadDims lists those head_dims.
	F16Layers   int
	F16HeadDims []int
	// UnrotatedLayers counts the KV layers stored unrotated although the spec asks for
	// Hadamard rotation: their head_dim (UnrotatedHeadDims) is not a power of two.
	UnrotatedLayers   int
	UnrotatedHeadDims []int
}

// NewLayout assigns base to every KV layer of m, and boundary to the first and last
// boundaryLayers of the KV layers (so a hybrid model's recurrent layers do not count).
// Boundary layers never get a tighter format than base, for keys and values separately:
// with an fp16 base every layer is fp16.
func NewLayout(m ModelShape, base Spec, boundaryLayers int, boundary Spec) (Layout, error) {
	return newLayout(m, base, boundaryLayers, boundary, nil)
}

// layerFit adapts a layer's spec to its head dimensions (the policy's group choice);
// f16 reports that the layer falls back to fp16.
type layerFit func(s Spec, kHeadDim, vHeadDim int, boundary bool) (out Spec, f16 bool, err error)

func newLayout(m ModelShape, base Spec, boundaryLayers int, boundary Spec, fit layerFit) (Layout, error) {
	if boundaryLayers < 0 {
		return Layout{}, fmt.Errorf("kvstore: negative boundary layer count %d", boundaryLayers)
	}
	boundary = Spec{K: looser(boundary.K, base.K), V: looser(boundary.V, base.V)}
	if boundary == base {
		boundaryLayers = 0
	}
	if boundaryLayers == 0 {
		boundary = base
	}
	l := Layout{Base: base, Boundary: boundary, BoundaryLayers: boundaryLayers, Specs: make([]Spec, len(m.Layers))}
	kv := m.KVLayers()
	l.KVLayerCount = len(kv)
	total := m.KVBefore + len(kv) + m.KVAfter
	for n, i := range kv {
		g := m.KVBefore + n // the layer's place among the whole model's KV layers
		s, isBoundary := base, g < boundaryLayers || g >= total-boundaryLayers
		if isBoundary {
			s = boundary
		}
		ls := m.Layers[i]
		if fit != nil {
			fs, f16, err := fit(s, ls.KHeadDim, ls.VHeadDim, isBoundary)
			if err != nil {
				return Layout{}, fmt.Errorf("layer %d: %w", i, err)
			}
			if f16 {
				l.F16Layers++
				if !slices.Contains(l.F16HeadDims, ls.KHeadDim) {
					l.F16HeadDims = append(l.F16HeadDims, ls.KHeadDim)
				}
			} else if s.K.Rotated && !fs.K.Rotated || s.V.Rotated && !fs.V.Rotated {
				l.UnrotatedLayers++
				if !slices.Contains(l.UnrotatedHeadDims, ls.KHeadDim) {
					l.UnrotatedHeadDims = append(l.UnrotatedHeadDims, ls.KHeadDim)
				}
			}
			s = fs
		}
		if fit != nil && n == 0 { // the spec strings show the groups the first KV layer got
			if fb, f16, _ := fit(base, ls.KHeadDim, ls.VHeadDim, false); !f16 {
				l.Base = fb
			}
			if fb, f16, _ := fit(boundary, ls.KHeadDim, ls.VHeadDim, true); !f16 {
				l.Boundary = fb
			}
		}
		if err := s.Validate(ls.KHeadDim, ls.VHeadDim); err != nil {
			return Layout{}, fmt.Errorf("layer %d: %w", i, err)
		}
		l.Specs[i] = s
	}
	return l, nil
}

// looser is the format of a and b with more bits per element (a on a tie).
func looser(a, b Format) Format {
	if b.BitsPerElement() > a.BitsPerElement() {
		return b
	}
	return a
}

// TokenBytes is the KV storage one more token adds to a sequence, over the layers
// that grow (full attention), in steady state (past QuantizedKVStart).
func (l Layout) TokenBytes(m ModelShape) int64 {
	var n int64
	for i, ls := range m.Layers {
		if ls.Kind == LayerFull || ls.Kind == LayerLatent {
			n += int64(l.Specs[i].TokenBytes(ls.KVHeads, ls.KHeadDim, ls.VHeadDim))
		}
	}
	return n
}

// Bytes is the cache storage of one sequence of ctx tokens: full layers hold ctx
// tokens (at most MaxKVSize), latent layers ctx tokens, sliding layers at most their window, recurrent layers
// their state. Below QuantizedKVStart every layer is fp16.
func (l Layout) Bytes(m ModelShape, ctx int) int64 {
	var n int64
	for i, ls := range m.Layers {
		s := l.Specs[i]
		if ctx < l.QuantizedKVStart {
			s = SpecF16
		}
		tokens := ctx
		switch ls.Kind {
		case LayerFull:
			if l.MaxKVSize > 0 {
				tokens = min(tokens, l.MaxKVSize)
			}
		case LayerSliding:
			tokens = min(tokens, ls.Window)
		case LayerLatent:
		case LayerRecurrent:
			n += ls.State
			continue
		default:
			continue
		}
		n += int64(tokens) * int64(s.TokenBytes(ls.KVHeads, ls.KHeadDim, ls.VHeadDim))
	}
	return n
}

// String is the layout as `mlxg ps` and the log show it:
// "K8/V4 g64/32, boundary 2@8/8, 10 of 40 layers with KV".
func (l Layout) String() string {
	out := l.Base.String()
	if l.BoundaryLayers > 0 {
		out += fmt.Sprintf(", boundary %d@%s/%s", l.BoundaryLayers, l.Boundary.K.bitsLabel(), l.Boundary.V.bitsLabel())
	}
	if l.QuantizedKVStart > 0 && l.Base.Quantized() {
		out += fmt.Sprintf(", fp16 until %d tokens", l.QuantizedKVStart)
	}
	if l.MaxKVSize > 0 {
		out += fmt.Sprintf(", max %d tokens", l.MaxKVSize)
	}
	if l.F16Layers > 0 {
		out += fmt.Sprintf(", fp16 in %d layers (head_dim %s: no KV group of 32, 64 or 128 divides it)", l.F16Layers, joinInts(l.F16HeadDims))
	}
	if l.UnrotatedLayers > 0 {
		out += fmt.Sprintf(", unrotated in %d layers (head_dim %s: Hadamard rotation needs a power of two)", l.UnrotatedLayers, joinInts(l.UnrotatedHeadDims))
	}
	return out + fmt.Sprintf(", %d of %d layers with KV", l.KVLayerCount, len(l.Specs))
}

// joinInts spells head dims as "96/80".
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, d := range v {
		s[i] = strconv.Itoa(d)
	}
	return strings.Join(s, "/")
}
