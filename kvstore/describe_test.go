package kvstore

import (
	"slices"
	"testing"
)

// TestDescribeRoundTrips: every cache kind remade from its description describes the same,
// with the same spec and window (a float32 sliding-window cache too, which before kept
// every position but attended over all of them once remade on a pipeline's worker).
func TestDescribeRoundTrips(t *testing.T) {
	a := AffineFormat
	full, _ := NewFull(2, 64, 64, false)
	full32, _ := NewFull(2, 64, 64, true)
	q, _ := NewQuantized(2, 64, 64, Spec{K: a(8, 32), V: a(4, 32)}, 256)
	q40, _ := NewQuantized(4, 128, 128, Spec{K: FormatQ4_0, V: FormatQ4_0}, 0)
	rot, _ := NewRotating(2, 64, 64, 512, Spec{K: a(8, 64), V: FormatF16}, 0)
	qh, _ := NewQuantized(2, 64, 64, Spec{K: a(8, 64).Rotate(true), V: a(4, 16).Rotate(true)}, 0)
	rh, _ := NewRotating(2, 64, 64, 512, Spec{K: FormatQ4_0.Rotate(true), V: a(4, 32)}, 0)
	win, _ := NewFullWindow(2, 64, 64, true, 8) // gpt-oss's and Gemma 4's float32 sliding layers
	for _, c := range []Layer{full, full32, q, q40, rot, qh, rh, win} {
		d := Describe(c)
		n, err := NewDescribed(d)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		if got := Describe(n); !slices.Equal(got, d) {
			t.Errorf("%T: described %v, remade as %v", c, d, got)
		}
		if w, ok := c.(interface{ Window() int }); ok && w.Window() != n.(interface{ Window() int }).Window() {
			t.Errorf("%T: window %d remade as %d", c, w.Window(), n.(interface{ Window() int }).Window())
		}
		if b, ok := c.(interface{ Target() Spec }); ok && b.Target() != n.(interface{ Target() Spec }).Target() {
			t.Errorf("%T: spec %v remade as %v", c, b.Target(), n.(interface{ Target() Spec }).Target())
		}
	}
	if n, err := NewDescribed(Describe(nil)); n != nil || err != nil {
		t.Errorf("none: %v, %v", n, err)
	}
}

// A share of a split model's shape keeps the whole model's boundary layers.
func TestLayoutBoundaryOfAShare(t *testing.T) {
	a := AffineFormat
	full := LayerShape{Kind: LayerFull, KVHeads: 2, KHeadDim: 64, VHeadDim: 64}
	var m ModelShape
	for range 6 {
		m.Layers = append(m.Layers, full)
	}
	base, boundary := Spec{K: a(8, 32), V: a(4, 32)}, Spec{K: a(8, 32), V: a(8, 32)}
	whole, err := NewLayout(m, base, 2, boundary)
	if err != nil {
		t.Fatal(err)
	}
	// Rank 0 holds layers 0-2, rank 1 layers 3-5.
	for lo := 0; lo < 6; lo += 3 {
		share := ModelShape{Layers: make([]LayerShape, 6), KVBefore: lo, KVAfter: 3 - lo}
		copy(share.Layers[lo:lo+3], m.Layers[lo:lo+3])
		l, err := NewLayout(share, base, 2, boundary)
		if err != nil {
			t.Fatal(err)
		}
		for i := lo; i < lo+3; i++ {
			if l.Specs[i] != whole.Specs[i] {
				t.Errorf("layer %d of the share from %d: %v, the whole model's %v", i, lo, l.Specs[i], whole.Specs[i])
			}
		}
	}
}
