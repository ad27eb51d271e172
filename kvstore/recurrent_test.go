package kvstore

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestRecurrentCheckpoints(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	r, err := NewRecurrent(24, 100)
	if err != nil {
		t.Fatal(err)
	}
	if r.StateBytes() != 124*4 || r.Bytes() != 124*4 {
		t.Fatalf("bytes %d %d", r.StateBytes(), r.Bytes())
	}
	step := func(n int) {
		for _, s := range [][]float32{r.State(0), r.State(1)} {
			for i := range s {
				s[i] = s[i]*0.9 + float32(rng.NormFloat64())
			}
		}
		r.Advance(n)
	}
	step(10)
	r.Checkpoint()
	at10 := cloneState([][]float32{r.State(0), r.State(1)})
	step(5)
	r.Checkpoint()
	step(7)
	if r.Len() != 22 || !slices.Equal(r.Checkpoints(), []int{10, 15}) || r.Bytes() != 3*124*4 {
		t.Fatalf("len %d checkpoints %v bytes %d", r.Len(), r.Checkpoints(), r.Bytes())
	}
	fork := r.Clone()
	if err := r.Truncate(12); err == nil {
		t.Fatal("rewinding to a position without a checkpoint accepted")
	}
	if err := r.Truncate(10); err != nil {
		t.Fatal(err)
	}
	if r.Len() != 10 || !slices.Equal(r.State(0), at10[0]) || !slices.Equal(r.State(1), at10[1]) || !slices.Equal(r.Checkpoints(), []int{10}) {
		t.Fatalf("after rewind: len %d checkpoints %v", r.Len(), r.Checkpoints())
	}
	// The fork kept its own state and checkpoints.
	if fork.Len() != 22 || !slices.Equal(fork.Checkpoints(), []int{10, 15}) || slices.Equal(fork.State(0), r.State(0)) {
		t.Fatalf("fork: len %d checkpoints %v", fork.Len(), fork.Checkpoints())
	}
	if err := r.Truncate(0); err != nil || r.Len() != 0 || slices.ContainsFunc(r.State(1), func(x float32) bool { return x != 0 }) {
		t.Fatalf("rewind to 0: %v", err)
	}
	if _, err := NewRecurrent(); err == nil {
		t.Fatal("empty state accepted")
	}
	if _, err := NewRecurrent(4, 0); err == nil {
		t.Fatal("zero-size tensor accepted")
	}
}
