package qwen25vl

import (
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

func init() { model.RegisterVisionMemory("qwen2_5_vl", visionMemory) }

// visionMemory is the tower's estimate for the memory plan: the largest image the processor
// makes (max_pixels/patch² patches), the peak of the pass that encodes it, and its features.
func visionMemory(cfg *model.Config, proc *vision.Processor) (int, int64, int64, error) {
	var top struct {
		Vision *VisionConfig `json:"vision_config"`
	}
	raw, _ := json.Marshal(cfg.Raw)
	if err := json.Unmarshal(raw, &top); err != nil || top.Vision == nil {
		return 0, 0, 0, fmt.Errorf("config.json: no vision_config (%v)", err)
	}
	vc := *top.Vision
	if vc.InChannels == 0 {
		vc.InChannels = 3
	}
	if proc.Kind != "qwen" || proc.Patch != vc.Patch || proc.Merge != vc.Merge || vc.Heads <= 0 {
		return 0, 0, 0, fmt.Errorf("preprocessor_config.json (patch %d, merge %d) does not match vision_config (patch %d, merge %d)", proc.Patch, proc.Merge, vc.Patch, vc.Merge)
	}
	n := proc.MaxPatches()
	return n, encodeBuffers(vc, n) + encodeHost(vc, n), 4 * int64(n/(vc.Merge*vc.Merge)) * int64(vc.Out), nil
}

// attentionScores is the most attention scores the CPU backend's BlockAttention holds at
// once (runner/cpu's scoreBudget).
const attentionScores = 1 << 22

// encodeBuffers bounds the bytes of float32 activations the CPU backend holds at once in
// Tower.Encode over n patches: Encode frees all but what the next step reads, so the peak
// is its largest step. Per patch, with h the width, I the MLP's, d a head's, C a patch's
// values, o the language model's width and m² the merge group:
//
//	embedding:  the patches, the product, cos and sin                           C + h + d
//	attention:  h, cos and sin, x, q and k before and after RoPE, v, the
//	            output and one head's scratch (at most 4d), plus the scores      8h + 5d (+ S)
//	projection: h, cos and sin, the output, its product, the new h              4h + d
//	MLP:        h, cos and sin, x, gate, up and their SwiGLU;                    2h + 3I + d
//	            then the SwiGLU, the down product and the new h                  3h + I + d
//	merger:     h, cos and sin, its norm, the reshape, two products, the GELU,
//	            the rows put back in order and their concatenation               5h + d + 3·o/m²
//
// S is the window's or image's scores up to attentionScores plus the second product's
// tiles (26 rows of n floats a thread), as for Qwen3.5's tower.
func encodeBuffers(vc VisionConfig, n int) int64 {
	N, h, I := int64(n), int64(vc.Hidden), int64(vc.Intermediate)
	d := h / int64(vc.Heads)
	C := int64(vc.InChannels * vc.Temporal * vc.Patch * vc.Patch)
	m2 := int64(vc.Merge * vc.Merge)
	scores := min(N*N, max(attentionScores, 4*N)) + int64(runtime.NumCPU())*26*N
	floats := max(N*(C+h+d), N*(8*h+5*d)+scores, N*(4*h+d), N*(2*h+3*I+d), N*(3*h+I+d), N*(5*h+d)+3*(N/m2)*int64(vc.Out))
	return 4 * floats
}

// encodeHost is what encoding n patches holds on the Go heap: the preprocessed patches and
// Encode's copy in window order (C each), the normalised image (C/temporal), the rotary
// tables in the processor's and in window order (d each), and the features copied out.
func encodeHost(vc VisionConfig, n int) int64 {
	N, h := int64(n), int64(vc.Hidden)
	d := h / int64(vc.Heads)
	C := int64(vc.InChannels * vc.Temporal * vc.Patch * vc.Patch)
	m2 := int64(vc.Merge * vc.Merge)
	return 4 * (N*(2*C+C/int64(vc.Temporal)+2*d) + (N/m2)*int64(vc.Out))
}
