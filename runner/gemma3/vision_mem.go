package gemma3

import (
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

func init() { model.RegisterVisionMemory("gemma3", visionMemory) }

// visionMemory is the tower's estimate for the memory plan: every image is resized to
// image_size², so (image_size/patch)² patches; the peak of the pass that encodes one; and its
// mm_tokens_per_image rows of the language model's width.
func visionMemory(cfg *model.Config, proc *vision.Processor) (int, int64, int64, error) {
	vc := VisionConfig{Hidden: 768, Intermediate: 3072, Layers: 12, Heads: 12, Channels: 3, ImageSize: 224, Patch: 16}
	raw, _ := json.Marshal(cfg.Raw["vision_config"])
	if err := json.Unmarshal(raw, &vc); err != nil {
		return 0, 0, 0, fmt.Errorf("config.json: vision_config: %w", err)
	}
	var top struct {
		Tokens int `json:"mm_tokens_per_image"`
	}
	raw, _ = json.Marshal(cfg.Raw)
	_ = json.Unmarshal(raw, &top)
	if top.Tokens == 0 {
		top.Tokens = 256
	}
	if proc.Kind != "fixed" || proc.Width != vc.ImageSize || proc.Height != vc.ImageSize || vc.Patch <= 0 || vc.Heads <= 0 {
		return 0, 0, 0, fmt.Errorf("preprocessor_config.json resizes to %d×%d, the tower (%+v) reads %d×%d", proc.Width, proc.Height, vc, vc.ImageSize, vc.ImageSize)
	}
	g := vc.ImageSize / vc.Patch
	n := g * g
	return n, encodePeak(vc, n, top.Tokens, cfg.HiddenSize), 4 * int64(top.Tokens) * int64(cfg.HiddenSize), nil
}

// attentionScores is the most attention scores the CPU backend's BlockAttention holds at once
// (runner/cpu's scoreBudget: it takes the queries of a long block in chunks).
const attentionScores = 1 << 22

// encodePeak is the peak bytes of Tower.Encode over one image of n patches: the backend's buffers at
// their largest step (encodeBuffers) and what lives on the Go heap beside them (encodeHost).
func encodePeak(vc VisionConfig, n, tokens, out int) int64 {
	return encodeBuffers(vc, n, tokens, out) + encodeHost(vc, n, tokens, out)
}

// encodeBuffers is the most bytes of float32 activations the CPU backend holds at once in Tower.Encode
// over one image of n patches. Every op's result is a new buffer, and Encode frees (compute.Free) all
// but what the next step reads, so the peak is the largest of its steps. With h the tower's width, I
// its MLP width, d a head's width, C a patch's values (channels·patch²), T the tokens, o the language
// model's width and c the queries whose scores the attention holds at once (all n, or fewer when n²
// passes attentionScores), per step:
//
//	embedding:   the patches' tensor, the positions, the patch product, h              n·(C + 3h)
//	attention:   h, x, q, k, v, the output, and the scratch of one head: its keys
//	             and values transposed, c queries, their outputs and scores            6n·h + 2n·d + 2c·d + c·n
//	projection:  h, the output, its product, the new h                                4n·h
//	MLP:         h, x, the first product and its GELU; then h, the GELU, the second
//	             product and the new h                                                 n·(2h + 2I), n·(3h + I)
//	pooling:     the post norm, the k² sums of token rows and their mean               2n·h
//	projector:   the pooled rows, their norm and the projection                        T·(2h + o)
//
// and the attention's second product (the weights times the values, n long) takes a tile of 26 rows
// of n floats on each of the backend's threads, at most one per CPU. A lazy backend that evaluates
// the pass as one graph may hold more; TestVisionMemory holds this to the CPU backend's own count of
// its buffers (ActivationPeak).
func encodeBuffers(vc VisionConfig, n, tokens, out int) int64 {
	N, h, I := int64(n), int64(vc.Hidden), int64(vc.Intermediate)
	d := h / int64(vc.Heads)
	C := int64(vc.Channels * vc.Patch * vc.Patch)
	T, o := int64(tokens), int64(out)
	c := min(N, max(4, attentionScores/N))
	tile := func(in int64) int64 { return 26 * in * int64(runtime.NumCPU()) }
	floats := max(N*(C+3*h),
		6*N*h+2*N*d+2*c*d+c*N+tile(N),
		4*N*h,
		N*(2*h+2*I),
		N*(3*h+I),
		2*N*h,
		T*(2*h+o))
	return 4 * floats
}

// encodeHost is what encoding one image of n patches (S² pixels) holds on the Go heap, counted until
// the pass ends although the collector may take some of it sooner: the resized image and the resize's
// intermediate (bytes: the output's width times the source rows it reads, as many as the output's for
// a source of its height; a taller source's is larger), the preprocessed image (3 floats a pixel),
// Encode's patch rows (as many) and positions (h a patch), and the features read back and copied out
// (o a token).
func encodeHost(vc VisionConfig, n, tokens, out int) int64 {
	S2 := int64(vc.ImageSize) * int64(vc.ImageSize)
	return 4 * (S2*6/4 + 3*S2 + 3*S2 + int64(n)*int64(vc.Hidden) + 2*int64(tokens)*int64(out))
}
