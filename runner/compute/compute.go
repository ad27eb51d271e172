// Package compute is the tensor interface the architectures are written against, and
// that each backend implements: the pure-Go CPU backend (runner/cpu), the reference,
// and the Metal backend (metal/, MLX through libmlxc). Backends register themselves
// by name (Register, in their init) and are opened by name (Open), so that the code
// above the interface never imports an implementation (driver.go).
//
// The interface is deliberately small and coarse where fusion matters. Tensors are
// 2-D, rows × columns, row-major: a sequence of T positions is T rows; heads are packed
// along the columns (head h of a row is columns h*headDim .. (h+1)*headDim-1) and an
// op that works per head takes the head size. Weights are bound once, by the
// safetensors key they are stored under, in the checkpoint's own format (MLX-quantized
// or float). A forward pass runs in a Context: a CPU context computes each op as it is
// called; a Metal context may only record it and evaluate the graph once, when Float32s
// is called. Errors are sticky: an op on bad shapes records the first error, later ops
// do nothing, and Float32s returns it; no op panics on bad input.
package compute

import (
	"fmt"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/safetensors"
)

// Quant describes how a weight matrix is stored. The zero value means not quantized
// (F32, F16 or BF16).
type Quant struct {
	Mode      quant.Mode // quant.Affine, MXFP4, MXFP8, NVFP4; "" when not quantized
	Bits      int
	GroupSize int
}

// Quantized reports whether q describes a quantized weight.
func (q Quant) Quantized() bool { return q.Mode != "" }

// Source supplies checkpoint tensors by safetensors key (a *safetensors.Checkpoint).
type Source interface {
	Tensor(name string) (*safetensors.Tensor, bool)
}

// Matrix finds the tensor prefix+".weight" that a Backend's Weight binds, and its
// logical rows and columns: a matrix, or a stack of expert matrices [E, out, in]
// (mlx-lm's switch_mlp, also a conv1d kernel) bound as one E·out × in matrix, the same
// bytes in the same order. cols is the stored last dimension, which packs several
// codes to a word in a quantized tensor.
func Matrix(src Source, prefix string) (t *safetensors.Tensor, rows, cols int, err error) {
	name := prefix + ".weight"
	t, ok := src.Tensor(name)
	if !ok {
		return nil, 0, 0, fmt.Errorf("checkpoint has no tensor %q", name)
	}
	if len(t.Shape) != 2 && len(t.Shape) != 3 {
		return nil, 0, 0, fmt.Errorf("tensor %q has shape %v, want a matrix (or a stack of expert matrices)", name, t.Shape)
	}
	rows, cols = t.Shape[0], t.Shape[len(t.Shape)-1]
	if len(t.Shape) == 3 {
		rows *= t.Shape[1]
	}
	return t, rows, cols, nil
}

// VectorTensor finds the 1-D tensor name that a Backend's Vector binds.
func VectorTensor(src Source, name string) (*safetensors.Tensor, error) {
	t, ok := src.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("checkpoint has no tensor %q", name)
	}
	if len(t.Shape) != 1 {
		return nil, fmt.Errorf("tensor %q has shape %v, want a vector", name, t.Shape)
	}
	return t, nil
}

// Backend binds weights and makes contexts. It is safe for concurrent use once the
// weights are bound; each Context is used by one goroutine.
type Backend interface {
	// Name is a short description for logs, e.g. "cpu (8 threads)".
	Name() string
	// Weight binds the matrix prefix+".weight", out × in (rows are output features):
	// float, or when q is quantized MLX-packed codes with prefix+".scales" and, in affine
	// mode, prefix+".biases". A bias vector prefix+".bias" is bound too when present.
	// One Weight serves Linear and Embed, so tied embeddings share it.
	Weight(src Source, prefix string, q Quant) (Weight, error)
	// Vector binds a 1-D float tensor such as a norm's weight.
	Vector(src Source, name string) (Vector, error)
	// NewContext starts a forward pass.
	NewContext() Context
}

// Weight is a bound matrix (and optional bias).
type Weight interface {
	// Dims returns the output and input sizes: rows and columns of the logical matrix.
	Dims() (out, in int)
	Quant() Quant
}

// Vector is a bound 1-D weight.
type Vector interface {
	Len() int
}

// Tensor is an activation inside a Context.
type Tensor interface {
	Dims() (rows, cols int)
}

// Context runs one forward pass. Tensors belong to their context and are invalid
// after Close.
type Context interface {
	// Embed gathers rows ids of w: len(ids) × in.
	Embed(w Weight, ids []int32) Tensor
	// Linear is x·Wᵀ (+ bias): x is T × in, the result T × out.
	Linear(x Tensor, w Weight) Tensor
	// RMSNorm normalises each row of x over its columns and scales by w:
	// x / sqrt(mean(x²) + eps) * w. len(w) must equal the columns.
	RMSNorm(x Tensor, w Vector, eps float32) Tensor
	// Reshape reinterprets x with the same elements as rows × cols (e.g. T × H·d as
	// T·H × d for a per-head norm).
	Reshape(x Tensor, rows, cols int) Tensor
	// RoPE rotates each head of x (T × H·headDim), row i at position offset+i, in the
	// "rotate half" layout of Hugging Face models: pairs (j, j+dims/2) of the first
	// r.Dims columns of a head; pairs (2j, 2j+1) when r.Interleaved.
	RoPE(x Tensor, r *RoPE, headDim, offset int) Tensor
	// Attention appends k and v (T × kvHeads·headDim, RoPE'd) to cache, then returns
	// causal grouped-query attention of q (T × heads·headDim) over it: T × heads·vHeadDim.
	Attention(q, k, v Tensor, cache kvstore.Layer, heads int, scale float32) Tensor
	// SwiGLU is silu(gate) * up, elementwise.
	SwiGLU(gate, up Tensor) Tensor
	// Add and Mul are elementwise over tensors of equal dims.
	Add(a, b Tensor) Tensor
	Mul(a, b Tensor) Tensor
	// Rows is rows start .. start+n-1 of x.
	Rows(x Tensor, start, n int) Tensor
	// Float32s evaluates x and returns its elements row-major (a new slice the caller
	// owns), or the context's first error.
	Float32s(x Tensor) ([]float32, error)
	// Err returns the first error recorded by an op, if any.
	Err() error
	// Close releases the context's buffers.
	Close()
}

// Freer is implemented by contexts that can reuse activation memory within a forward
// pass: the CPU backend, and the MLX backend in a vision tower's pass (metal/vision.go),
// where each Free is a barrier of its lazy graph.
type Freer interface {
	// Free declares that of the tensors made so far only keep are still needed.
	Free(keep ...Tensor)
}

// Free tells c, if it is a Freer, that only keep are still needed. Architectures call
// it between layers, which keeps a long prefill's activations one layer deep.
func Free(c Context, keep ...Tensor) {
	if f, ok := c.(Freer); ok {
		f.Free(keep...)
	}
}
