package kvstore

import "fmt"

// NewCaches makes one sequence's attention caches for a model under a layout: Full
// (fp16) for unquantized full-attention layers, Quantized for quantized ones, Rotating
// for sliding-window layers and, when l.MaxKVSize > 0, for full-attention layers too.
// Layers without per-token KV (recurrent, none) get nil: a hybrid model keeps its
// recurrent state in a Recurrent of its own.
func NewCaches(m ModelShape, l Layout) ([]Layer, error) {
	if len(l.Specs) != len(m.Layers) {
		return nil, fmt.Errorf("kvstore: a layout of %d layers for a model of %d", len(l.Specs), len(m.Layers))
	}
	caches := make([]Layer, len(m.Layers))
	for i, ls := range m.Layers {
		var (
			c   Layer
			err error
		)
		spec, window := l.Specs[i], ls.Window
		switch ls.Kind {
		case LayerFull:
			if l.MaxKVSize > 0 {
				window = l.MaxKVSize
				c, err = NewRotating(ls.KVHeads, ls.KHeadDim, ls.VHeadDim, window, spec, l.QuantizedKVStart)
			} else if spec == SpecF16 {
				c, err = NewFull(ls.KVHeads, ls.KHeadDim, ls.VHeadDim, false)
			} else {
				c, err = NewQuantized(ls.KVHeads, ls.KHeadDim, ls.VHeadDim, spec, l.QuantizedKVStart)
			}
		case LayerLatent:
			// MaxKVSize does not apply: latent attention runs over every position.
			if spec == SpecF16 {
				c, err = NewFull(ls.KVHeads, ls.KHeadDim, ls.VHeadDim, false)
			} else {
				c, err = NewQuantized(ls.KVHeads, ls.KHeadDim, ls.VHeadDim, spec, l.QuantizedKVStart)
			}
		case LayerSliding:
			if l.MaxKVSize > 0 {
				window = min(window, l.MaxKVSize)
			}
			c, err = NewRotating(ls.KVHeads, ls.KHeadDim, ls.VHeadDim, window, spec, l.QuantizedKVStart)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		caches[i] = c
	}
	return caches, nil
}
