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
// (runner/cpu's scoreBudget).
const attentionScores = 1 << 22

// encodePeak is the peak bytes of Tower.Encode over one image of n patches (S² pixels), float32
// activations, as the CPU backend runs it: each op's result is a new buffer, and compute.Free at
// the end of each layer releases all but the residual stream. With h the tower's width, I its MLP
// width, d a head's width, T the tokens and o the language model's width:
//
//	the resized image and the resize's intermediate (bytes: the output's width
//	times the source rows it reads, as many as the output's for a source of its
//	height; a taller source's is larger), the normalised image (3 floats a pixel)   3S²/2 + 3S²
//	the host arrays Encode builds: the patch rows and their position embeddings     3S² + n·h
//	their tensors, the patch product and the sum                                    3S² + 3n·h
//	one layer's results: x, q, k, v, the attention, its projection, h, x again,
//	                     the MLP's second product, h again                           n·10h
//	                     the MLP's first product and its GELU                        n·2I
//	the attention's scratch: a head's keys and values, a chunk of c queries and
//	                     outputs and their scores (c = n, or fewer when n² passes
//	                     4,194,304)                                                  2n·d + 2c·d + c·n
//	the post norm, the pooling's sums, mean and norm, the projection, the result
//	                     read back and copied into its span                          n·h + T·h·(k²+2) + 3T·o
//	the products' weight tiles: 26 rows of each input width (a patch's 3P² values,
//	                     h, I, n) per thread, a thread per core                      26·(3P² + h + I + n)·cores
//	the pass's bookkeeping (the resampling tables, the ops' closures and headers)   32,768
//
// Later layers hold less (the inputs are freed). TestVisionMemory holds the estimate to the CPU
// backend's allocations.
func encodePeak(vc VisionConfig, n, tokens, out int) int64 {
	N, h, I := int64(n), int64(vc.Hidden), int64(vc.Intermediate)
	d := h / int64(vc.Heads)
	S2 := int64(vc.ImageSize) * int64(vc.ImageSize)
	T, o := int64(tokens), int64(out)
	k2 := N / max(T, 1)
	chunk := min(N, max(4, attentionScores/N))
	P2 := int64(vc.Channels * vc.Patch * vc.Patch)
	floats := S2*3/2 + 3*S2 + 3*S2 + N*h + 3*S2 + 3*N*h + N*10*h + N*2*I + 2*N*d + 2*chunk*d + chunk*N +
		N*h + T*h*(k2+2) + 3*T*o + 26*(P2+h+I+N)*int64(runtime.NumCPU()) + 32768
	return 4 * floats
}
