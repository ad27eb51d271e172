// Package gptoss is OpenAI's gpt-oss architecture (model_type "gpt_oss": gpt-oss-20b and
// gpt-oss-120b), as transformers' GptOssForCausalLM computes it:
//   - pre-norm decoder layers (RMSNorm, eps rms_norm_eps);
//   - grouped-query attention with biases on q, k, v and o, RoPE over the whole head
//     with YaRN scaling (rope_scaling or rope_parameters), scale head_dim^-0.5, and a
//     learned sink logit per query head (self_attn.sinks) that joins each softmax's
//     denominator and is dropped from its output;
//   - layers alternating between a sliding window of sliding_window positions and full
//     attention (layer_types; without it the even layers slide, transformers' default);
//   - a mixture of num_local_experts experts on every layer: a router with a bias
//     (mlp.router), the num_experts_per_tok largest logits softmaxed among themselves,
//     and experts with biases on their gate, up and down projections whose activation
//     is the clamped SwiGLU (gate clamped above and up on both sides at swiglu_limit,
//     gate·sigmoid(swiglu_alpha·gate)·(up + 1)).
//
// Weights are read as mlx-lm stores them (mlx_lm/models/gpt_oss.py): the experts stacked
// under mlp.experts.{gate,up,down}_proj ([experts, out, in], with [experts, out] biases),
// quantized like any linear layer or, as mlx-community ships gpt-oss, in mxfp4. `mlxg
// create` converts Hugging Face's layout (fused, interleaved gate_up_proj; OpenAI's mxfp4
// blocks and scales) into it.
package gptoss

import (
	"encoding/json"
	"fmt"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/llama"
	"github.com/mlxg/mlxg/runner/model"
)

func init() { model.Register("gpt_oss", New) }

// Config is the gpt-oss part of config.json.
type Config struct {
	NumExperts    int      `json:"num_local_experts"`
	TopK          int      `json:"num_experts_per_tok"`
	SlidingWindow int      `json:"sliding_window"`
	LayerTypes    []string `json:"layer_types"`
	SwiGLUAlpha   *float32 `json:"swiglu_alpha"`
	SwiGLULimit   *float32 `json:"swiglu_limit"`
}

// ReadConfig reads and checks the gpt-oss fields of cfg.
func ReadConfig(cfg *model.Config) (Config, error) {
	var g Config
	raw, err := json.Marshal(cfg.Raw)
	if err == nil {
		err = json.Unmarshal(raw, &g)
	}
	if err != nil {
		return g, fmt.Errorf("config.json: %w", err)
	}
	if g.NumExperts <= 0 || g.TopK <= 0 || g.TopK > g.NumExperts {
		return g, fmt.Errorf("config.json: num_local_experts (%d) and num_experts_per_tok (%d) must be positive, with num_experts_per_tok <= num_local_experts", g.NumExperts, g.TopK)
	}
	return g, nil
}

// Sliding reports which layers use the sliding window.
func (g Config) Sliding(layers int) ([]bool, error) {
	out := make([]bool, layers)
	if len(g.LayerTypes) > 0 && len(g.LayerTypes) != layers {
		return nil, fmt.Errorf("config.json: layer_types has %d entries for %d layers", len(g.LayerTypes), layers)
	}
	for i := range out {
		if len(g.LayerTypes) == 0 {
			out[i] = i%2 == 0 // transformers' and mlx-lm's default: sliding, full, sliding, ...
			continue
		}
		switch g.LayerTypes[i] {
		case "sliding_attention":
			out[i] = true
		case "full_attention":
		default:
			return nil, fmt.Errorf("config.json: layer %d has layer type %q (full_attention or sliding_attention)", i, g.LayerTypes[i])
		}
	}
	for _, s := range out {
		if s && g.SlidingWindow <= 0 {
			return nil, fmt.Errorf("config.json: sliding_window must be positive for sliding-window layers, got %d", g.SlidingWindow)
		}
	}
	return out, nil
}

// Activation is the experts' clamped SwiGLU (transformers' defaults 1.702 and 7).
func (g Config) Activation() compute.ClampedSwiGLU {
	a := compute.ClampedSwiGLU{Alpha: 1.702, Limit: 7}
	if g.SwiGLUAlpha != nil {
		a.Alpha = *g.SwiGLUAlpha
	}
	if g.SwiGLULimit != nil {
		a.Limit = *g.SwiGLULimit
	}
	return a
}

// New binds a gpt-oss checkpoint.
func New(l *model.Loader) (model.Network, error) {
	if err := compute.Supports[compute.ClampedMoEContext](l.Backend, "gpt-oss's experts"); err != nil {
		return nil, err
	}
	if err := compute.Supports[compute.SinkAttentionContext](l.Backend, "attention sinks"); err != nil {
		return nil, err
	}
	if l.Has("model.layers.0.mlp.experts.gate_up_proj") || l.Has("model.layers.0.mlp.experts.gate_up_proj_blocks") {
		return nil, fmt.Errorf("the checkpoint is in Hugging Face's layout (fused gate_up_proj): convert it to the MLX layout with `mlxg create`")
	}
	g, err := ReadConfig(l.Config)
	if err != nil {
		return nil, err
	}
	sliding, err := g.Sliding(l.Config.NumLayers)
	if err != nil {
		return nil, err
	}
	rope, err := l.Config.RoPE()
	if err != nil {
		return nil, err
	}
	cfg := l.Config
	n := &Network{Eps: cfg.RMSNormEps}
	n.Embed = l.Linear("model.embed_tokens", cfg.VocabSize, cfg.HiddenSize)
	routing := compute.Routing{TopK: g.TopK, SoftmaxTopK: true}
	for i := 0; i < cfg.NumLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		a := &Attention{Attention: llama.NewAttention(l, p+"self_attn.", rope)}
		a.Sinks = l.Vector(p+"self_attn.sinks", cfg.NumHeads)
		if sliding[i] {
			a.Window = g.SlidingWindow
		}
		n.Layers = append(n.Layers, Layer{
			InputNorm: l.Vector(p+"input_layernorm.weight", cfg.HiddenSize),
			Attn:      a,
			PostNorm:  l.Vector(p+"post_attention_layernorm.weight", cfg.HiddenSize),
			MLP:       NewExperts(l, p+"mlp.", g.NumExperts, cfg.IntermediateSize, routing, g.Activation()),
		})
	}
	n.Norm = l.Vector("model.norm.weight", cfg.HiddenSize)
	n.Head = l.Head(n.Embed, cfg.VocabSize, cfg.HiddenSize)
	return n, nil
}

// Network is the decoder stack.
type Network struct {
	Embed  compute.Weight // model.embed_tokens
	Layers []Layer
	Norm   compute.Vector // model.norm
	Head   compute.Weight // lm_head
	Eps    float32
}

// Layer is one decoder layer.
type Layer struct {
	InputNorm compute.Vector // input_layernorm
	Attn      *Attention     // self_attn
	PostNorm  compute.Vector // post_attention_layernorm
	MLP       *Experts       // mlp
}

// Forward implements model.Network.
func (n *Network) Forward(c compute.Context, tokens []int32, caches []kvstore.Layer, lastOnly bool) compute.Tensor {
	return n.ForwardBatch(c, model.Single(tokens, caches, lastOnly))
}

// ForwardBatch implements model.BatchNetwork.
func (n *Network) ForwardBatch(c compute.Context, b *model.Batch) compute.Tensor {
	h := c.Embed(n.Embed, b.Tokens())
	guesser, guess := compute.Ext[compute.ExpertGuesser](c)
	for i, layer := range n.Layers {
		if w := layer.Attn.Window; w > 0 {
			if err := b.CheckWindow(i, w); err != nil {
				return compute.Fail(c, fmt.Errorf("gpt_oss: %w", err))
			}
		}
		h = c.Add(h, layer.Attn.Forward(c, c.RMSNorm(h, layer.InputNorm, n.Eps), b, i))
		if guess && i+1 < len(n.Layers) {
			// The next layer's experts, guessed from the stream before this layer's
			// experts add to it (a streaming backend reads them ahead).
			next := n.Layers[i+1]
			next.MLP.Guess(c, guesser, h, func() compute.Tensor { return c.RMSNorm(h, next.PostNorm, n.Eps) })
		}
		h = c.Add(h, layer.MLP.Forward(c, c.RMSNorm(h, layer.PostNorm, n.Eps)))
		compute.Free(c, h)
	}
	return c.Linear(c.RMSNorm(b.Last(c, h), n.Norm, n.Eps), n.Head)
}

// Attention is Llama's attention block (with its biases) whose softmax has a sink per
// query head, over a sliding window on the sliding layers.
type Attention struct {
	*llama.Attention
	Sinks  compute.Vector // self_attn.sinks
	Window int            // sliding_window on sliding layers, 0 on full ones
}

// Forward computes the block.
func (a *Attention) Forward(c compute.Context, x compute.Tensor, b *model.Batch, layer int) compute.Tensor {
	q, k, v := a.QKV(c, x)
	q = b.RoPE(c, q, a.RoPE, a.HeadDim)
	k = b.RoPE(c, k, a.RoPE, a.HeadDim)
	return c.Linear(b.AttentionSinks(c, q, k, v, layer, a.Heads, llama.Scale(a.HeadDim), a.Sinks), a.O)
}

// Experts is the expert block: the router and the stacked experts.
type Experts struct {
	Router         compute.Weight // mlp.router (with its bias)
	Gate, Up, Down compute.Weight // mlp.experts.*_proj, stacked, with their biases
	Experts        int
	Routing        compute.Routing
	Act            compute.ClampedSwiGLU
}

// NewExperts binds the block at prefix (".../mlp.").
func NewExperts(l *model.Loader, prefix string, experts, inter int, r compute.Routing, act compute.ClampedSwiGLU) *Experts {
	h := l.Config.HiddenSize
	return &Experts{
		Router:  l.Linear(prefix+"router", experts, h),
		Gate:    l.Linear(prefix+"experts.gate_proj", experts*inter, h),
		Up:      l.Linear(prefix+"experts.up_proj", experts*inter, h),
		Down:    l.Linear(prefix+"experts.down_proj", experts*h, inter),
		Experts: experts,
		Routing: r,
		Act:     act,
	}
}

// Guess hands g the router's logits on norm() as a guess of the experts the block will
// pick, when g streams them and wants a guess for h's rows.
func (e *Experts) Guess(c compute.Context, g compute.ExpertGuesser, h compute.Tensor, norm func() compute.Tensor) {
	if rows, _ := h.Dims(); !g.WantsExpertGuess(e.Gate, rows, e.Routing) {
		return
	}
	g.GuessExperts(c.Linear(norm(), e.Router), e.Gate, e.Experts, e.Routing)
}

// Forward computes the block.
func (e *Experts) Forward(c compute.Context, x compute.Tensor) compute.Tensor {
	m, ok := compute.Ext[compute.ClampedMoEContext](c)
	if !ok {
		return compute.Unsupported(c, "gpt-oss's experts")
	}
	return m.ClampedMoE(x, c.Linear(x, e.Router), e.Gate, e.Up, e.Down, e.Experts, e.Routing, e.Act)
}

// NewCaches implements model.CacheMaker: per sliding layer a cache that keeps the window
// (fp16 kvstore.Rotating; with fp32 a float32 cache that keeps every position and attends
// over the window), per full layer a full-attention cache.
func (n *Network) NewCaches(fp32 bool) ([]kvstore.Layer, error) {
	caches := make([]kvstore.Layer, len(n.Layers))
	for i, l := range n.Layers {
		a := l.Attn
		var err error
		switch {
		case a.Window > 0 && fp32:
			caches[i], err = kvstore.NewFullWindow(a.KVHeads, a.HeadDim, a.HeadDim, true, a.Window)
		case a.Window > 0:
			caches[i], err = kvstore.NewRotating(a.KVHeads, a.HeadDim, a.HeadDim, a.Window, kvstore.SpecF16, 0)
		default:
			caches[i], err = kvstore.NewFull(a.KVHeads, a.HeadDim, a.HeadDim, fp32)
		}
		if err != nil {
			return nil, err
		}
	}
	return caches, nil
}
