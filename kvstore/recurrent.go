package kvstore

import (
	"fmt"
	"slices"
)

// Recurrent is the cache of a linear-attention (or state-space) layer of a hybrid model
// for one sequence: a fixed set of float32 state tensors (for Gated DeltaNet, the
// convolution window and the recurrent matrix) that the layer reads and overwrites per
// token, so its size does not grow with the context. Since a state cannot be rewound,
// it is checkpointed at chosen positions (the end of each prompt), and a prefix hit
// resumes from the checkpoint that matches it exactly.
type Recurrent struct {
	sizes       []int
	state       [][]float32
	n           int
	checkpoints map[int][][]float32
}

// NewRecurrent makes a zero state of tensors with the given element counts.
func NewRecurrent(sizes ...int) (*Recurrent, error) {
	if len(sizes) == 0 {
		return nil, fmt.Errorf("kvstore: a recurrent state needs at least one tensor")
	}
	r := &Recurrent{sizes: slices.Clone(sizes), checkpoints: map[int][][]float32{}}
	for _, s := range sizes {
		if s <= 0 {
			return nil, fmt.Errorf("kvstore: recurrent state tensor sizes must be positive, got %v", sizes)
		}
		r.state = append(r.state, make([]float32, s))
	}
	return r, nil
}

// State returns tensor i of the state, for the layer to read and overwrite in place.
func (r *Recurrent) State(i int) []float32 { return r.state[i] }

// Len is the number of positions the state has consumed.
func (r *Recurrent) Len() int { return r.n }

// Advance records that the layer consumed n more positions into the state.
func (r *Recurrent) Advance(n int) { r.n += n }

// StateBytes is the size of one copy of the state.
func (r *Recurrent) StateBytes() int64 {
	var n int64
	for _, s := range r.sizes {
		n += int64(s) * stateBytesPerElement
	}
	return n
}

// Bytes is the memory held: the state and every checkpoint.
func (r *Recurrent) Bytes() int64 { return int64(1+len(r.checkpoints)) * r.StateBytes() }

// Checkpoint keeps a copy of the state at the current position.
func (r *Recurrent) Checkpoint() {
	r.checkpoints[r.n] = cloneState(r.state)
}

// Checkpoints lists the positions that have a checkpoint, ascending.
func (r *Recurrent) Checkpoints() []int {
	ps := make([]int, 0, len(r.checkpoints))
	for p := range r.checkpoints {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// Truncate rewinds the state to position n, which must be the current position, 0 (the
// zero state) or a checkpoint; checkpoints past n are dropped.
func (r *Recurrent) Truncate(n int) error {
	switch cp, ok := r.checkpoints[n]; {
	case n == r.n:
	case n == 0:
		for _, s := range r.state {
			clear(s)
		}
	case ok:
		for i, s := range cp {
			copy(r.state[i], s)
		}
	default:
		return fmt.Errorf("kvstore: cannot rewind a recurrent state from %d to %d positions: it has checkpoints only at %v", r.n, n, r.Checkpoints())
	}
	for p := range r.checkpoints {
		if p > n {
			delete(r.checkpoints, p)
		}
	}
	r.n = n
	return nil
}

// Clone copies the state and its checkpoints, for a sequence that forks this one.
func (r *Recurrent) Clone() *Recurrent {
	c := &Recurrent{sizes: slices.Clone(r.sizes), state: cloneState(r.state), n: r.n, checkpoints: map[int][][]float32{}}
	for p, s := range r.checkpoints {
		c.checkpoints[p] = cloneState(s)
	}
	return c
}

func cloneState(s [][]float32) [][]float32 {
	out := make([][]float32, len(s))
	for i, t := range s {
		out[i] = slices.Clone(t)
	}
	return out
}
