package kvstore

import "fmt"

// Shared is the cache of a layer that attends over another layer's keys and values
// (Gemma 4's KV-shared layers, which reuse the last earlier layer of their kind): it
// stores nothing. Its Append drops what it is given, its Attend attends over the
// source's last positions, which the source appended earlier in the same pass, and its
// length is the source's. The prefix cache sees it as a layer without KV (its source's
// blocks already carry the positions), and the memory policy plans it as LayerNone.
type Shared struct {
	src Layer
}

// NewShared makes the cache of a layer that reads src's keys and values.
func NewShared(src Layer) (*Shared, error) {
	if src == nil {
		return nil, fmt.Errorf("kvstore: a shared layer needs the cache it reads")
	}
	if _, ok := src.(*Shared); ok {
		return nil, fmt.Errorf("kvstore: a shared layer cannot read another shared layer")
	}
	return &Shared{src: src}, nil
}

// Source is the cache the layer reads.
func (s *Shared) Source() Layer { return s.src }

// Dims implements Layer: the source's.
func (s *Shared) Dims() (kvHeads, kHeadDim, vHeadDim int) { return s.src.Dims() }

// Len implements Layer: the source's positions.
func (s *Shared) Len() int { return s.src.Len() }

// Append implements Layer: the positions are the source's, already stored; it checks
// only that they are.
func (s *Shared) Append(k, v []float32, n int) error {
	if s.src.Len() < n {
		return fmt.Errorf("kvstore: a shared layer appends %d positions, but its source holds %d", n, s.src.Len())
	}
	return nil
}

// Attend implements Layer over the source's positions.
func (s *Shared) Attend(a Attention) error { return s.src.Attend(a) }

// Truncate implements Layer: the source is truncated as its own layer.
func (s *Shared) Truncate(n int) error {
	if n > s.src.Len() {
		return fmt.Errorf("kvstore: truncating a shared layer to %d positions, its source holds %d", n, s.src.Len())
	}
	return nil
}

// Bytes implements Layer: nothing of its own.
func (s *Shared) Bytes() int64 { return 0 }
