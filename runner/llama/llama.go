// Package llama is the Llama architecture (model_type "llama": Llama 2, 3, 3.1, 3.2,
// 3.3), as transformers' LlamaForCausalLM computes it. Its building blocks (the decoder
// stack, with sliding-window layers where a family has them, attention, the SwiGLU MLP)
// are exported for the architectures that differ from it in one place, such as qwen2,
// qwen3 and mistral.
package llama

import (
	"fmt"
	"math"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
)

func init() { model.Register("llama", New) }

// New binds a Llama checkpoint.
func New(l *model.Loader) (model.Network, error) {
	rope, err := l.Config.RoPE()
	if err != nil {
		return nil, err
	}
	return NewDecoder(l, func(p string) Mixer { return NewAttention(l, p, rope) }), nil
}

// Mixer is a layer's attention block: x holds the rows of every sequence of b, and
// layer is the block's index into each sequence's caches.
type Mixer interface {
	Forward(c compute.Context, x compute.Tensor, b *model.Batch, layer int) compute.Tensor
}

// Decoder is the decoder-only stack: embeddings, pre-norm residual layers, final
// norm and the output head.
type Decoder struct {
	Embed  compute.Weight // model.embed_tokens
	Layers []Layer
	Norm   compute.Vector // model.norm
	Head   compute.Weight // lm_head, or Embed when tied
	Eps    float32
	// Windows, when set, is each layer's sliding window (0: full attention); the
	// sliding layers need caches that keep their window (NewCaches).
	Windows          []int
	KVHeads, HeadDim int // the caches' shape, for NewCaches
}

// Layer is one decoder layer.
type Layer struct {
	InputNorm compute.Vector // input_layernorm
	Attn      Mixer          // self_attn
	PostNorm  compute.Vector // post_attention_layernorm
	MLP       *MLP           // mlp
}

// NewDecoder binds the stack, with attn binding each layer's attention at its prefix.
func NewDecoder(l *model.Loader, attn func(prefix string) Mixer) *Decoder {
	return NewDecoderAt(l, "model.", "lm_head", attn)
}

// NewDecoderAt is NewDecoder for a stack stored under base (a multimodal checkpoint's
// "language_model.model.") with its output projection at head.
func NewDecoderAt(l *model.Loader, base, head string, attn func(prefix string) Mixer) *Decoder {
	cfg := l.Config
	d := &Decoder{Eps: cfg.RMSNormEps, KVHeads: cfg.NumKVHeads, HeadDim: cfg.HeadDim}
	d.Embed = l.Linear(base+"embed_tokens", cfg.VocabSize, cfg.HiddenSize)
	for i := 0; i < cfg.NumLayers; i++ {
		p := fmt.Sprintf("%slayers.%d.", base, i)
		d.Layers = append(d.Layers, Layer{
			InputNorm: l.Vector(p+"input_layernorm.weight", cfg.HiddenSize),
			Attn:      attn(p + "self_attn."),
			PostNorm:  l.Vector(p+"post_attention_layernorm.weight", cfg.HiddenSize),
			MLP:       NewMLP(l, p+"mlp."),
		})
	}
	d.Norm = l.Vector(base+"norm.weight", cfg.HiddenSize)
	d.Head = l.HeadAt(head, d.Embed, cfg.VocabSize, cfg.HiddenSize)
	return d
}

// Forward implements model.Network.
func (d *Decoder) Forward(c compute.Context, tokens []int32, caches []kvstore.Layer, lastOnly bool) compute.Tensor {
	return d.ForwardBatch(c, model.Single(tokens, caches, lastOnly))
}

// ForwardBatch implements model.BatchNetwork.
func (d *Decoder) ForwardBatch(c compute.Context, b *model.Batch) compute.Tensor {
	h := b.Embed(c, d.Embed) // image features at their placeholders (Qwen2.5-VL); the token embeddings otherwise
	for i, layer := range d.Layers {
		if w := d.window(i); w > 0 {
			if err := b.CheckWindow(i, w); err != nil {
				return compute.Fail(c, err)
			}
		}
		h = c.Add(h, layer.Attn.Forward(c, c.RMSNorm(h, layer.InputNorm, d.Eps), b, i))
		h = c.Add(h, layer.MLP.Forward(c, c.RMSNorm(h, layer.PostNorm, d.Eps)))
		compute.Free(c, h) // only the residual stream lives on to the next layer
	}
	return c.Linear(c.RMSNorm(b.Last(c, h), d.Norm, d.Eps), d.Head)
}

func (d *Decoder) window(i int) int {
	if d.Windows == nil {
		return 0
	}
	return d.Windows[i]
}

// Windowed is a Decoder with sliding-window layers (Windows set), which makes caches of
// its own kinds; a Decoder without windows leaves them to the model (a network that
// makes its own caches forgoes what only plain ones allow, prefill coalescing).
type Windowed struct{ *Decoder }

// Network is d, or d as a Windowed when some layer slides.
func (d *Decoder) Network() model.Network {
	for _, w := range d.Windows {
		if w > 0 {
			return Windowed{d}
		}
	}
	return d
}

// NewCaches implements model.CacheMaker: per sliding layer a cache that keeps the
// window (fp16 kvstore.Rotating; with fp32 a float32 cache that keeps every position
// and attends over the window), per full layer a full-attention cache.
func (w Windowed) NewCaches(fp32 bool) ([]kvstore.Layer, error) {
	d := w.Decoder
	caches := make([]kvstore.Layer, len(d.Layers))
	for i := range d.Layers {
		w := d.window(i)
		var err error
		switch {
		case w > 0 && fp32:
			caches[i], err = kvstore.NewFullWindow(d.KVHeads, d.HeadDim, d.HeadDim, true, w)
		case w > 0:
			caches[i], err = kvstore.NewRotating(d.KVHeads, d.HeadDim, d.HeadDim, w, kvstore.SpecF16, 0)
		default:
			caches[i], err = kvstore.NewFull(d.KVHeads, d.HeadDim, d.HeadDim, fp32)
		}
		if err != nil {
			return nil, err
		}
	}
	return caches, nil
}

// Attention is grouped-query self-attention with rotary positions; q, k, v and o
// biases are used when the checkpoint has them (attention_bias, qwen2).
type Attention struct {
	Q, K, V, O              compute.Weight // q_proj, k_proj, v_proj, o_proj
	Heads, KVHeads, HeadDim int
	RoPE                    *compute.RoPE
	// QRoPE, when set, rotates the queries instead of RoPE (Ministral 3's, which also
	// scales them per position).
	QRoPE *compute.RoPE
}

// NewAttention binds the attention block at prefix.
func NewAttention(l *model.Loader, prefix string, rope *compute.RoPE) *Attention {
	cfg := l.Config
	a := &Attention{Heads: cfg.NumHeads, KVHeads: cfg.NumKVHeads, HeadDim: cfg.HeadDim, RoPE: rope}
	a.Q = l.Linear(prefix+"q_proj", a.Heads*a.HeadDim, cfg.HiddenSize)
	a.K = l.Linear(prefix+"k_proj", a.KVHeads*a.HeadDim, cfg.HiddenSize)
	a.V = l.Linear(prefix+"v_proj", a.KVHeads*a.HeadDim, cfg.HiddenSize)
	a.O = l.Linear(prefix+"o_proj", cfg.HiddenSize, a.Heads*a.HeadDim)
	return a
}

// Forward implements Mixer.
func (a *Attention) Forward(c compute.Context, x compute.Tensor, b *model.Batch, layer int) compute.Tensor {
	q, k, v := a.QKV(c, x)
	qr := a.RoPE
	if a.QRoPE != nil {
		qr = a.QRoPE
	}
	q = b.RoPE(c, q, qr, a.HeadDim)
	k = b.RoPE(c, k, a.RoPE, a.HeadDim)
	return c.Linear(b.Attention(c, q, k, v, layer, a.Heads, Scale(a.HeadDim)), a.O)
}

// QKV is x's query, key and value projections, computed together where the backend can
// (compute.Linears: one pass over the three weights in a decode step).
func (a *Attention) QKV(c compute.Context, x compute.Tensor) (q, k, v compute.Tensor) {
	var out [3]compute.Tensor
	compute.Linears(c, x, []compute.Weight{a.Q, a.K, a.V}, out[:])
	return out[0], out[1], out[2]
}

// Scale is the attention scale 1/sqrt(headDim).
func Scale(headDim int) float32 { return float32(1 / math.Sqrt(float64(headDim))) }

// MLP is the SwiGLU feed-forward block: down(silu(gate(x)) * up(x)).
type MLP struct {
	Gate, Up, Down compute.Weight // gate_proj, up_proj, down_proj
}

// NewMLP binds the MLP at prefix.
func NewMLP(l *model.Loader, prefix string) *MLP {
	cfg := l.Config
	return &MLP{
		Gate: l.Linear(prefix+"gate_proj", cfg.IntermediateSize, cfg.HiddenSize),
		Up:   l.Linear(prefix+"up_proj", cfg.IntermediateSize, cfg.HiddenSize),
		Down: l.Linear(prefix+"down_proj", cfg.HiddenSize, cfg.IntermediateSize),
	}
}

// Forward computes the block.
func (m *MLP) Forward(c compute.Context, x compute.Tensor) compute.Tensor {
	var gateUp [2]compute.Tensor
	compute.Linears(c, x, []compute.Weight{m.Gate, m.Up}, gateUp[:])
	return c.Linear(c.SwiGLU(gateUp[0], gateUp[1]), m.Down)
}
