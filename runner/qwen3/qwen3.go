// Package qwen3 is the dense Qwen3 architecture (model_type "qwen3"), as transformers'
// Qwen3ForCausalLM computes it: Llama's decoder whose attention normalises each
// query and key head with its own RMSNorm (q_norm, k_norm) before the rotary
// embedding, and has no biases.
package qwen3

import (
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/llama"
	"github.com/mlxg/mlxg/runner/model"
)

func init() { model.Register("qwen3", New) }

// New binds a Qwen3 checkpoint.
func New(l *model.Loader) (model.Network, error) {
	rope, err := l.Config.RoPE()
	if err != nil {
		return nil, err
	}
	return llama.NewDecoder(l, func(p string) llama.Mixer { return NewAttention(l, p, rope) }), nil
}

// Attention is Llama's attention with per-head q and k RMSNorm.
type Attention struct {
	*llama.Attention
	QNorm, KNorm compute.Vector // q_norm, k_norm: head_dim weights shared by all heads
	Eps          float32
}

// NewAttention binds the attention block at prefix.
func NewAttention(l *model.Loader, prefix string, rope *compute.RoPE) *Attention {
	hd := l.Config.HeadDim
	return &Attention{
		Attention: llama.NewAttention(l, prefix, rope),
		QNorm:     l.Vector(prefix+"q_norm.weight", hd),
		KNorm:     l.Vector(prefix+"k_norm.weight", hd),
		Eps:       l.Config.RMSNormEps,
	}
}

// Forward implements llama.Mixer.
func (a *Attention) Forward(c compute.Context, x compute.Tensor, b *model.Batch, layer int) compute.Tensor {
	T, _ := x.Dims()
	hd := a.HeadDim
	q, k, v := a.QKV(c, x)
	q = c.Reshape(c.RMSNorm(c.Reshape(q, T*a.Heads, hd), a.QNorm, a.Eps), T, a.Heads*hd)
	k = c.Reshape(c.RMSNorm(c.Reshape(k, T*a.KVHeads, hd), a.KNorm, a.Eps), T, a.KVHeads*hd)
	q = b.RoPE(c, q, a.RoPE, hd)
	k = b.RoPE(c, k, a.RoPE, hd)
	return c.Linear(b.Attention(c, q, k, v, layer, a.Heads, llama.Scale(hd)), a.O)
}
