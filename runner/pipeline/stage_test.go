package pipeline

import (
	"reflect"
	"slices"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		layers, size int
		want         [][2]int
	}{
		{4, 2, [][2]int{{0, 2}, {2, 4}}},
		{5, 2, [][2]int{{0, 3}, {3, 5}}},
		{7, 3, [][2]int{{0, 3}, {3, 5}, {5, 7}}},
		{1, 2, [][2]int{{0, 1}, {1, 1}}}, // the last rank holds only the head
		{2, 3, [][2]int{{0, 1}, {1, 2}, {2, 2}}},
	} {
		st, err := Split(c.layers, c.size)
		if err != nil {
			t.Fatalf("%d over %d: %v", c.layers, c.size, err)
		}
		var got [][2]int
		for _, s := range st {
			got = append(got, [2]int{s.Lo, s.Hi})
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%d layers over %d: %v, want %v", c.layers, c.size, got, c.want)
		}
	}
	if _, err := Split(1, 3); err == nil {
		t.Error("1 layer over 3 ranks split")
	}
}

// SplitShared never cuts between a KV-shared layer and the layer it reads, stays as near
// Split as that allows, and refuses too many ranks; without sharing it is Split.
func TestSplitShared(t *testing.T) {
	// Gemma 4 E2B's kind: 6 layers, 4 reading 3's KV and 5 reading 2's.
	src := []int{0, 1, 2, 3, 3, 2}
	for _, c := range []struct {
		size int
		want []int // each stage's [Lo, Hi), flattened
	}{
		{2, []int{0, 2, 2, 6}},
		{3, []int{0, 2, 2, 6, 6, 6}},
		{4, []int{0, 1, 1, 2, 2, 6, 6, 6}},
		{5, nil},
	} {
		stages, err := SplitShared(6, c.size, src)
		var got []int
		for _, s := range stages {
			got = append(got, s.Lo, s.Hi)
		}
		if c.want == nil {
			if err == nil {
				t.Errorf("%d ranks: %v, want a refusal", c.size, stages)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%d ranks: %v (%v), want %v", c.size, got, err, c.want)
		}
	}
	self := []int{0, 1, 2, 3, 4}
	for size := 2; size <= 6; size++ {
		a, _ := Split(5, size)
		b, _ := SplitShared(5, size, self)
		if !slices.Equal(a, b) {
			t.Errorf("%d ranks without sharing: %v, Split's %v", size, b, a)
		}
	}
}
