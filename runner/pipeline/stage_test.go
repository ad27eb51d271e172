package pipeline

import (
	"reflect"
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
