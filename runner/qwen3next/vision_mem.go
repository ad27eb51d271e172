package qwen3next

import (
	"fmt"

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

// encodePeak is the peak bytes of Tower.Encode over n patches, float32 activations, as the CPU
// backend runs it: each op's result is a new buffer, and compute.Free at the end of each block
// releases all but the residual stream and the rotary tables. With h the tower's width, I its MLP
// width, d a head's width, C a patch's values (channels·temporal·patch²), o the language model's
// width and m² the merge group, the largest live set is inside the first block, whose Free has not
// yet dropped the pass's inputs:
//
//	the preprocessed image:           its patches                                      N·C
//	transients before the pass (counted though they are garbage by the peak): the
//	                                  normalised image (3 floats a pixel), the
//	                                  interpolated positions before reordering         N·(C/temporal + h)
//	host arrays Encode builds:       px N·C, positions N·h, cos and sin N·d/2 each   N·(C + h + d)
//	their tensors and the embedding:  px, positions, cos, sin, the patch product, h    N·(C + 3h + d)
//	one block's results:              x, q and k before and after RoPE, v, attention,
//	                                  its projection, h, x again, h again, the MLP's
//	                                  second product                                   N·12h
//	                                  the MLP's first product and its GELU              N·2I
//	the attention's scratch:          a head's keys and values transposed, a chunk of
//	                                  queries and outputs, the scores                  4N·d + 4,194,304 (4N past 2²⁰ patches)
//	the result, read back and copied into the spans                                    2·(N/m²)·o
//
// Later blocks hold less (the inputs are freed), and the merger less again (its products are N·h
// wide at most). A lazy backend that evaluates the pass as one graph may hold more; the tower runs
// on the CPU backend. TestVisionMemory holds the estimate to the CPU backend's allocations.
func encodePeak(vc VisionConfig, n int) int64 {
	N, h, I := int64(n), int64(vc.Hidden), int64(vc.Intermediate)
	d := h / int64(vc.Heads)
	C := int64(vc.InChannels * vc.Temporal * vc.Patch * vc.Patch)
	m2 := int64(vc.Merge * vc.Merge)
	floats := N*C + N*(C/int64(vc.Temporal)+h) + N*(C+h+d) + N*(C+3*h+d) + N*12*h + N*2*I + 4*N*d + max(attentionScores, 4*N) + 2*(N/m2)*int64(vc.Out)
	return 4 * floats
}
