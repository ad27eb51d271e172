package qwen3next

import (
	"fmt"
	"runtime"

	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

func init() {
	model.RegisterVisionMemory("qwen3_5", visionMemory)
	model.RegisterVisionMemory("qwen3_5_moe", visionMemory)
}

// visionMemory is the tower's estimate for the memory plan: the largest image the processor makes
// (smart_resize keeps its area within max_pixels, so max_pixels/patch² patches), the peak of the
// pass that encodes it, and its features (patches/merge² rows of the language model's width).
func visionMemory(cfg *model.Config, proc *vision.Processor) (int, int64, int64, error) {
	vc, _, err := visionConfig(cfg)
	if err != nil {
		return 0, 0, 0, err
	}
	if proc.Kind != "qwen" || proc.Patch != vc.Patch || proc.Merge != vc.Merge {
		return 0, 0, 0, fmt.Errorf("preprocessor_config.json (patch %d, merge %d) does not match vision_config (patch %d, merge %d)", proc.Patch, proc.Merge, vc.Patch, vc.Merge)
	}
	n := proc.MaxPatches()
	return n, encodePeak(vc, n), 4 * int64(n/(vc.Merge*vc.Merge)) * int64(vc.Out), nil
}

// attentionScores is the most attention scores the CPU backend's BlockAttention holds at once
// (runner/cpu's scoreBudget: it takes the queries of a long block in chunks).
const attentionScores = 1 << 22

// encodePeak is the peak bytes of Tower.Encode over n patches: the backend's buffers at their
// largest step (encodeBuffers) and what lives on the Go heap beside them (encodeHost).
func encodePeak(vc VisionConfig, n int) int64 { return encodeBuffers(vc, n) + encodeHost(vc, n) }

// encodeBuffers is the most bytes of float32 activations the CPU backend holds at once in Tower.Encode
// over n patches. Every op's result is a new buffer, and Encode frees (compute.Free) all but what the
// next step reads, so the peak is the largest of its steps. With h the tower's width, I its MLP width,
// d a head's width, C a patch's values (channels·temporal·patch²), o the language model's width, m²
// the merge group and S the attention scores held at once, per patch:
//
//	embedding:   the patches' tensor, the positions, the patch product, h, cos and sin    C + 3h + d
//	attention:   h, cos and sin, x, q and k before and after RoPE, v, the output,
//	             and the scratch of one head: its keys and values transposed, a chunk
//	             of queries and outputs (at most 4d), plus S and the product's tiles      8h + 5d (+ S)
//	projection:  h, cos and sin, the output, its product, the new h                      4h + d
//	MLP:         h, cos and sin, x, the first product and its GELU;                       2h + 2I + d
//	             then the GELU, the second product and the new h                          3h + I + d
//	merger:      h, cos and sin, its norm, the reshape, two products, the features read
//	             back                                                                    5h + d + 2·o/m²
//
// S is the whole block's n² scores up to attentionScores (the queries go in chunks past it), and the
// attention's second product (the weights times the values, n long) takes a tile of 26 rows of n
// floats on each of the backend's threads, at most one per CPU. A lazy
// backend that evaluates the pass as one graph may hold more; the tower runs on the CPU backend.
// TestVisionMemory holds this to the CPU backend's own count of its buffers (ActivationPeak).
func encodeBuffers(vc VisionConfig, n int) int64 {
	N, h, I := int64(n), int64(vc.Hidden), int64(vc.Intermediate)
	d := h / int64(vc.Heads)
	C := int64(vc.InChannels * vc.Temporal * vc.Patch * vc.Patch)
	m2 := int64(vc.Merge * vc.Merge)
	scores := min(N*N, max(attentionScores, 4*N)) + int64(runtime.NumCPU())*26*N
	floats := max(N*(C+3*h+d), N*(8*h+5*d)+scores, N*(4*h+d), N*(2*h+2*I+d), N*(3*h+I+d), N*(5*h+d)+2*(N/m2)*int64(vc.Out))
	return 4 * floats
}

// encodeHost is what encoding n patches holds on the Go heap, counted until the pass ends although the
// collector may take some of it sooner: the preprocessed patches (C a patch), Encode's copies of them,
// of the positions (h) and of the rotary tables (d), the preprocessing's transients (the normalised image,
// 3 floats a pixel = C/temporal a patch, and the positions before reordering, h), and the features copied
// out (o a merged group).
func encodeHost(vc VisionConfig, n int) int64 {
	N, h := int64(n), int64(vc.Hidden)
	d := h / int64(vc.Heads)
	C := int64(vc.InChannels * vc.Temporal * vc.Patch * vc.Patch)
	m2 := int64(vc.Merge * vc.Merge)
	return 4 * (N*(2*C+C/int64(vc.Temporal)+2*h+d) + (N/m2)*int64(vc.Out))
}
