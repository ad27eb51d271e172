package compute

import "math"

// VisionContext holds the operations of vision towers (Qwen3.5's ViT) and of rotary
// positions given per row (the vision tower's 2D RoPE, the language model's M-RoPE).
type VisionContext interface {
	// Input makes a rows × cols tensor of data (copied): a tower's patches, its
	// interpolated position embeddings, a pass's rotary angles.
	Input(data []float32, rows, cols int) Tensor
	// LayerNorm normalises each row of x to zero mean and unit variance over its columns
	// ((x − mean) / sqrt(var + eps), the variance biased), then scales by w and adds b.
	LayerNorm(x Tensor, w, b Vector, eps float32) Tensor
	// GELU is gelu(x) elementwise: the exact erf form, or gelu_pytorch_tanh when tanh.
	GELU(x Tensor, tanh bool) Tensor
	// RoPERows rotates each head of x (T × H·headDim) in the rotate-half layout with the
	// angles of its own row: cos and sin are T × D/2, and the pairs (j, j+D/2) of a
	// head's first D columns turn by row t's angle j (columns from D on are kept).
	RoPERows(x, cos, sin Tensor, headDim int) Tensor
	// BlockAttention is bidirectional multi-head attention within blocks of rows: q, k
	// and v are T × heads·headDim, blocks the sizes of consecutive row blocks (summing to
	// T), and each row attends to every row of its block alone; no cache. T × heads·headDim.
	BlockAttention(q, k, v Tensor, heads int, scale float32, blocks []int) Tensor
}

// MergedAngles appends to cos and sin the 2D rotary angles of a gh × gw patch grid for
// the Qwen vision towers (Qwen2.5-VL's, Qwen3.5's): invFreq holds the frequencies of one
// axis, and each patch's row gets len(invFreq) angles from its row then as many from its
// column. Patches come in the processors' order: merge × merge groups row-major, each
// group's patches row-major.
func MergedAngles(cos, sin, invFreq []float32, gh, gw, merge int) ([]float32, []float32) {
	for by := 0; by < gh/merge; by++ {
		for bx := 0; bx < gw/merge; bx++ {
			for my := range merge {
				for mx := range merge {
					pos := [2]int{by*merge + my, bx*merge + mx}
					for axis := range 2 {
						for _, f := range invFreq {
							a := float32(pos[axis]) * f
							cos = append(cos, float32(math.Cos(float64(a))))
							sin = append(sin, float32(math.Sin(float64(a))))
						}
					}
				}
			}
		}
	}
	return cos, sin
}
