package backend

import (
	"slices"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
)

// brokenVision is the CPU backend with one vision operation wrong, as a backend that
// got it wrong would have: the rows of an image attend causally only (spans dropped
// everywhere, or on KV-shared layers only), the per-row rotary angles turn the other
// way, or the clipped linears are not clamped.
type brokenVision struct {
	*cpu.Backend
	noSpans, noSharedSpans, badRoPE, noClamp bool
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

func (c brokenVisionCtx) AttentionShared(q compute.Tensor, cache kvstore.Layer, heads int, scale float32, spans []kvstore.Span) compute.Tensor {
	if c.b.noSpans || c.b.noSharedSpans {
		spans = nil
	}
	sc, _ := compute.Ext[compute.SharedKVContext](c.Context)
	return sc.AttentionShared(q, cache, heads, scale, spans)
}

func (c brokenVisionCtx) RoPERows(x, cos, sin compute.Tensor, headDim int) compute.Tensor {
	if c.b.badRoPE {
		a, _ := compute.Ext[compute.ActivationContext](c.Context)
		sin = a.Scale(sin, -1)
	}
	return c.VisionContext.RoPERows(x, cos, sin, headDim)
}

func (c brokenVisionCtx) Clamp(x compute.Tensor, lo, hi float32) compute.Tensor {
	if c.b.noClamp {
		return x
	}
	cl, _ := compute.Ext[compute.ClampContext](c.Context)
	return cl.Clamp(x, lo, hi)
}

// TestDoctorVisionModelsOnCPU: the image checks pass on the CPU backend against itself
// (one thread against two), and fail for a backend that drops Gemma's bidirectional
// image mask (their logits; Gemma 4's also when only its KV-shared layers drop it), turns
// the 2D and M-RoPE angles the wrong way (the Qwen and Gemma 4 towers' image features,
// and logits), or does not clamp Gemma 4's clipped linears (its features and logits),
// each only where the architecture uses the operation.
func TestDoctorVisionModelsOnCPU(t *testing.T) {
	models := TinyVisionModels(t.TempDir(), 3)
	if len(models) != len(visionModels)*len(ModelFormats) {
		t.Fatalf("%d vision models, want %d checkpoints in %d formats", len(models), len(visionModels), len(ModelFormats))
	}
	var names []string
	for _, m := range models {
		names = append(names, m.Name())
	}
	for _, want := range []string{"tiny qwen2_5_vl float32", "tiny qwen3_5 4-bit", "tiny qwen3_5_moe float32", "tiny gemma3 4-bit",
		"tiny gemma4 kv-shared float32", "tiny gemma4 kv-shared clipped 4-bit"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %q among the vision models %q", want, names)
		}
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
		// What the architecture uses: the image mask (Gemma), on KV-shared layers (Gemma
		// 4), RoPERows (all but Gemma 3's learned positions), Clamp (clipped linears).
		gemma3, gemma4 := m.ModelType == "gemma3", m.ModelType == "gemma4"
		spans, rope, clamp := gemma3 || gemma4, !gemma3, strings.Contains(m.Variant, "clipped")
		for _, c := range []struct {
			b                brokenVision
			features, logits bool // whether each passes
		}{
			{brokenVision{noSpans: true}, true, !spans},
			{brokenVision{noSharedSpans: true}, true, !gemma4},
			{brokenVision{badRoPE: true}, !rope, !rope},
			{brokenVision{noClamp: true}, !clamp, !clamp},
		} {
			if f, l := status(c.b); f != c.features || l != c.logits {
				t.Errorf("%s broken %+v: features pass %v, logits pass %v; want %v, %v", m.Name(), c.b, f, l, c.features, c.logits)
			}
		}
	}
}
