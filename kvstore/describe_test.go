package kvstore

import (
	"slices"
	"testing"
)

func TestDescribeRoundTrips(t *testing.T) {
	a := AffineFormat
	full, _ := NewFull(2, 64, 64, false)
	full32, _ := NewFull(2, 64, 64, true)
	q, _ := NewQuantized(2, 64, 64, Spec{K: a(8, 32), V: a(4, 32)}, 256)
	q40, _ := NewQuantized(4, 128, 128, Spec{K: FormatQ4_0, V: FormatQ4_0}, 0)
	rot, _ := NewRotating(2, 64, 64, 512, Spec{K: a(8, 64), V: FormatF16}, 0)
	for _, c := range []Layer{full, full32, q, q40, rot} {
		d := Describe(c)
		n, err := NewDescribed(d)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		if got := Describe(n); !slices.Equal(got, d) {
			t.Errorf("%T: described %v, remade as %v", c, d, got)
		}
	}
	if n, err := NewDescribed(Describe(nil)); n != nil || err != nil {
		t.Errorf("none: %v, %v", n, err)
	}
}
