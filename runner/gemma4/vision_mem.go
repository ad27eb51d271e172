package gemma4

import (
	"fmt"
	"runtime"

	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

func init() {
	model.RegisterVisionMemory("gemma4", visionMemory)
	model.RegisterVisionMemory("gemma4_unified", visionMemory)
}

// visionMemory is the tower's estimate for the memory plan: the largest image is the
// processor's budget, max_soft_tokens·k² patches; the peak of the pass that encodes it; and
// its max_soft_tokens rows of the language model's width.
func visionMemory(cfg *model.Config, proc *vision.Processor) (int, int64, int64, error) {
	vc, err := readVision(cfg)
	if err != nil {
		return 0, 0, 0, err
	}
	if proc.Kind != "gemma4" || proc.Patch != vc.Patch || proc.Merge != vc.Pool {
		return 0, 0, 0, fmt.Errorf("the image processor (%s, patch %d, pooling %d) does not fit the tower (%+v)", proc.Kind, proc.Patch, proc.Merge, vc)
	}
	n := proc.MaxPatches()
	return n, encodePeak(vc, n, proc.Tokens, cfg.HiddenSize), 4 * int64(proc.Tokens) * int64(cfg.HiddenSize), nil
}

// attentionScores is the most attention scores the CPU backend's BlockAttention holds at once
// (runner/cpu's scoreBudget).
const attentionScores = 1 << 22

// encodePeak is the peak bytes of Tower.Encode over one image of n patches: the backend's
// buffers at their largest step and what lives on the Go heap beside them.
func encodePeak(vc VisionConfig, n, tokens, out int) int64 {
	return encodeBuffers(vc, n, tokens, out) + encodeHost(vc, n, tokens, out)
}

// encodeBuffers bounds the bytes of float32 activations the CPU backend holds at once in
// Tower.Encode over one image of n patches: every op's result is a new buffer and Encode frees
// all but what the next step reads, so the peak is the largest step's. With h the tower's
// width, a = heads·head_dim, I the MLP's width, d a head's width, C a patch's values, T the
// tokens, o the language model's width and c the queries whose scores the attention holds at
// once, beside the rotary tables (n·d), per step:
//
//	embedding:  the patches, both position rows and their two halves, the product, two sums  n·(C + 7h)
//	q or k:     h, x, q (when k), the projection, its norm (and their reshapes), both halves'
//	            slices, their joins and turns, the reassembly's slices and join             2n·h + 11n·a
//	attention:  h, q, k, v, the output, one head's keys and values transposed, c queries,
//	            their outputs and scores                                                    n·h + 4n·a + 2n·d + 2c·d + c·n
//	output:     h, the attention's output, its product, norm and the sum                    4n·h + n·a
//	MLP:        h, x, both products and the GELU; then h, the GELU, the product, norm, sum  n·(2h + 3I), n·(4h + I)
//	pooling:    h, the k² partial sums, the scaled rows, standardisation's inputs and
//	            results, the norm, the projection                                           n·h + T·(7h + o)
//
// and while a product runs a tile of 26 rows of its input's width on each thread.
// TestVisionMemory holds this to the CPU backend's own count (ActivationPeak).
func encodeBuffers(vc VisionConfig, n, tokens, out int) int64 {
	N, h, I := int64(n), int64(vc.Hidden), int64(vc.Intermediate)
	d := int64(vc.HeadDim)
	a := int64(vc.Heads) * d
	C := int64(3 * vc.Patch * vc.Patch)
	T, o := int64(tokens), int64(out)
	cq := min(N, max(4, attentionScores/N))
	tile := func(in int64) int64 { return 26 * in * int64(runtime.NumCPU()) }
	floats := max(N*(C+7*h)+tile(C),
		2*N*h+11*N*a+tile(h),
		N*h+4*N*a+2*N*d+2*cq*d+cq*N+tile(N),
		4*N*h+N*a+tile(a),
		N*(2*h+3*I)+tile(h),
		N*(4*h+I)+tile(I),
		N*h+T*(7*h+o)+tile(h))
	if vc.Clipped {
		// Each clamp's copy of a product's input or output, on top of its step: most in
		// the MLP's first, whose gate and up products each clamp x and their result.
		floats += 2 * N * (h + max(I, a))
	}
	return 4 * (floats + N*d)
}

// encodeHost is what encoding one image of n patches holds on the Go heap: the resized image
// and the resize's intermediate (at most 3 bytes and 6 more a pixel), the preprocessed pixels
// and Encode's patch rows (C floats a patch each), the position ids and rotary tables, and the
// features read back and copied out (o a token).
func encodeHost(vc VisionConfig, n, tokens, out int) int64 {
	C := int64(3 * vc.Patch * vc.Patch)
	px := int64(n) * int64(vc.Patch*vc.Patch)
	return 9*px + 4*(3*px+2*int64(n)*C+int64(n)*(4+int64(vc.HeadDim))+2*int64(tokens)*int64(out))
}
