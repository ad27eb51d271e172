package compute

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
