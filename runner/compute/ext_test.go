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
