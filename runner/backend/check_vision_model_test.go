package backend

import (
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
)

// brokenVision is the CPU backend with one vision operation wrong, as a backend that
// got it wrong would have: the rows of an image attend causally only (spans dropped),
// or the per-row rotary angles turn the other way.
type brokenVision struct {
	*cpu.Backend
	noSpans, badRoPE bool
}

func (b brokenVision) Name() string { return "broken" }
func (b brokenVision) NewContext() compute.Context {
	c := b.Backend.NewContext()
	vc, _ := compute.Ext[compute.VisionContext](c)
	return brokenVisionCtx{c, vc, b}
}

type brokenVisionCtx struct {
	compute.Context
	compute.VisionContext
	b brokenVision
}

func (c brokenVisionCtx) Unwrap() compute.Context { return c.Context }

func (c brokenVisionCtx) AttentionSpans(q, k, v compute.Tensor, cache kvstore.Layer, heads int, scale float32, spans []kvstore.Span) compute.Tensor {
	if c.b.noSpans {
		return c.Attention(q, k, v, cache, heads, scale)
	}
	sc, _ := compute.Ext[compute.SpanAttentionContext](c.Context)
	return sc.AttentionSpans(q, k, v, cache, heads, scale, spans)
}

func (c brokenVisionCtx) RoPERows(x, cos, sin compute.Tensor, headDim int) compute.Tensor {
	if c.b.badRoPE {
		a, _ := compute.Ext[compute.ActivationContext](c.Context)
		sin = a.Scale(sin, -1)
	}
	return c.VisionContext.RoPERows(x, cos, sin, headDim)
}

// TestDoctorVisionModelsOnCPU: the image checks pass on the CPU backend against itself
// (one thread against two), and fail for a backend that drops Gemma 3's bidirectional
// image mask (its logits) or turns the Qwen towers' 2D and M-RoPE angles the wrong way (their
// image features and logits), each only where the architecture uses the operation.
func TestDoctorVisionModelsOnCPU(t *testing.T) {
	models := TinyVisionModels(t.TempDir(), 3)
	if len(models) != len(visionModelTypes)*len(ModelFormats) {
		t.Fatalf("%d vision models, want %v in %d formats", len(models), visionModelTypes, len(ModelFormats))
	}
	openCPU := func() (compute.Backend, error) { return cpu.New(2), nil }
	openOne := func() (compute.Backend, error) { return cpu.New(1), nil }
	for _, m := range models {
		res := CheckVisionModel(m, openCPU, nil, Float32)
		res = append(res, CheckVisionModel(m, openOne, openCPU, Float32)...)
		if len(res) != 4 {
			t.Fatalf("%s: %d results", m.Name(), len(res))
		}
		for _, r := range res {
			t.Logf("%-6s %-56s %-24s vs %-18s %.2e (tolerance %.0e) %s", r.Status(), r.Check, r.Backend, r.Against, r.RelErr, r.Tol, r.Note)
			if !r.OK() {
				t.Errorf("%s on %s: %.3g (tolerance %.0e) %v", r.Check, r.Backend, r.RelErr, r.Tol, r.Err)
			}
		}

		// status is each comparison's verdict with a broken backend: features, logits.
		status := func(b brokenVision) (features, logits bool) {
			res := CheckVisionModel(m, func() (compute.Backend, error) { b.Backend = cpu.New(2); return b, nil }, openCPU, Float32)
			for _, r := range res {
				t.Logf("broken %+v: %-6s %-56s %.2e %v", b, r.Status(), r.Check, r.RelErr, r.Err)
			}
			return res[1].OK(), res[2].OK()
		}
		gemma := m.ModelType == "gemma3"
		if f, l := status(brokenVision{noSpans: true}); !f || l != !gemma {
			t.Errorf("%s without the bidirectional image mask: features pass %v, logits pass %v; want true, %v", m.ModelType, f, l, !gemma)
		}
		if f, l := status(brokenVision{badRoPE: true}); f != gemma || l != gemma {
			t.Errorf("%s with RoPERows turning backwards: features pass %v, logits pass %v; want %v, %v", m.ModelType, f, l, gemma, gemma)
		}
	}
}
