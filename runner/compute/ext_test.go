package compute_test

import (
	"strings"
	"testing"

	"github.com/mlxg/mlxg/runner/compute"
)

// plain is a context with no optional operations; withMoE adds one; wrapper wraps.
type plain struct{ compute.Context }

func (plain) Close() {}

type withMoE struct{ plain }

func (withMoE) MoE(x, router compute.Tensor, gate, up, down compute.Weight, experts int, r compute.Routing) compute.Tensor {
	return nil
}

type wrapper struct{ compute.Context }

func (w wrapper) Unwrap() compute.Context { return w.Context }

type backend struct {
	compute.Backend
	ctx compute.Context
}

func (b backend) Name() string                { return "fake" }
func (b backend) NewContext() compute.Context { return b.ctx }

func TestExtAndSupports(t *testing.T) {
	if _, ok := compute.Ext[compute.MoEContext](wrapper{wrapper{withMoE{}}}); !ok {
		t.Error("Ext did not see through two wrappers")
	}
	if _, ok := compute.Ext[compute.MoEContext](wrapper{plain{}}); ok {
		t.Error("Ext found MoE in a context without it")
	}
	if err := compute.Supports[compute.MoEContext](backend{ctx: withMoE{}}, "experts"); err != nil {
		t.Error(err)
	}
	err := compute.Supports[compute.MoEContext](backend{ctx: plain{}}, "experts")
	if err == nil || !strings.Contains(err.Error(), "fake") || !strings.Contains(err.Error(), "experts") {
		t.Errorf("Supports on a backend without MoE: %v", err)
	}
	if d1, d2 := compute.Unsupported(plain{}, "x").Dims(); d1 != 0 || d2 != 0 {
		t.Error("Unsupported on a context that cannot fail returned a non-empty tensor")
	}
}

// TestConvAndConcatShape: the shape checks both backends run before CausalConv1D,
// ConcatRows and ConcatCols.
func TestConvAndConcatShape(t *testing.T) {
	if K, err := compute.ConvShape([2]int{5, 8}, 32, 24); K != 4 || err != nil {
		t.Errorf("a 4-tap kernel over 8 channels: K %d, %v", K, err)
	}
	if K, err := compute.ConvShape([2]int{5, 8}, 8, 0); K != 1 || err != nil {
		t.Errorf("a 1-tap kernel, no state: K %d, %v", K, err)
	}
	for _, c := range [][3]int{{0, 32, 24}, {8, 30, 24}, {8, 4, 0}, {8, 32, 16}} {
		if _, err := compute.ConvShape([2]int{5, c[0]}, c[1], c[2]); err == nil || !strings.Contains(err.Error(), "CausalConv1D") {
			t.Errorf("%d channels, kernel %d, state %d: %v", c[0], c[1], c[2], err)
		}
	}
	if n, err := compute.ConcatShape([][2]int{{2, 4}, {3, 4}}, true); n != 5 || err != nil {
		t.Errorf("ConcatRows: %d, %v", n, err)
	}
	if n, err := compute.ConcatShape([][2]int{{2, 4}, {2, 1}}, false); n != 5 || err != nil {
		t.Errorf("ConcatCols: %d, %v", n, err)
	}
	for _, c := range []struct {
		xs   [][2]int
		rows bool
		want string
	}{
		{nil, true, "ConcatRows of no tensors"},
		{nil, false, "ConcatCols of no tensors"},
		{[][2]int{{2, 4}, {3, 5}}, true, "ConcatRows of tensors of 4 and 5 columns"},
		{[][2]int{{2, 4}, {3, 4}}, false, "ConcatCols of tensors of 2 and 3 rows"},
	} {
		if _, err := compute.ConcatShape(c.xs, c.rows); err == nil || err.Error() != c.want {
			t.Errorf("%v: %v, want %q", c.xs, err, c.want)
		}
	}
}
