// Package qwen3moe is the Qwen3 mixture-of-experts architecture (model_type
// "qwen3_moe": Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-30B-A3B), as transformers'
// Qwen3MoeForCausalLM computes it: Qwen3's decoder (attention with per-head q/k
// RMSNorm) whose MLP is, on the layers decoder_sparse_step and mlp_only_layers
// select, a sparse block of num_experts SwiGLU experts with a linear router (softmax,
// top num_experts_per_tok, renormalised when norm_topk_prob).
//
// Experts are read as mlx-lm stores them: stacked per layer under
// mlp.switch_mlp.{gate,up,down}_proj ([experts, out, in], quantized like any linear
// layer); mlx-lm's checkpoint converter and `mlxg create` stack Hugging Face's
// per-expert tensors into that layout. Only the experts the router picks are read.
package qwen3moe

import (
	"encoding/json"
	"fmt"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/llama"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/qwen3"
)

func init() { model.Register("qwen3_moe", New) }

// MoEConfig is the mixture-of-experts part of config.json.
type MoEConfig struct {
	NumExperts        int   `json:"num_experts"`
	TopK              int   `json:"num_experts_per_tok"`
	MoEIntermediate   int   `json:"moe_intermediate_size"`
	NormTopK          *bool `json:"norm_topk_prob"`
	DecoderSparseStep *int  `json:"decoder_sparse_step"`
	MLPOnlyLayers     []int `json:"mlp_only_layers"`
}

// ReadMoEConfig reads and checks the mixture-of-experts fields of cfg.
func ReadMoEConfig(cfg *model.Config) (MoEConfig, error) {
	var m MoEConfig
	raw, err := json.Marshal(cfg.Raw)
	if err == nil {
		err = json.Unmarshal(raw, &m)
	}
	if err != nil {
		return m, fmt.Errorf("config.json: mixture-of-experts fields: %w", err)
	}
	if m.NumExperts <= 0 || m.TopK <= 0 || m.TopK > m.NumExperts || m.MoEIntermediate <= 0 {
		return m, fmt.Errorf("config.json: num_experts (%d), num_experts_per_tok (%d) and moe_intermediate_size (%d) must be positive, with num_experts_per_tok <= num_experts",
			m.NumExperts, m.TopK, m.MoEIntermediate)
	}
	return m, nil
}

// Sparse reports whether layer i has the expert block (transformers' rule).
func (m MoEConfig) Sparse(i int) bool {
	for _, l := range m.MLPOnlyLayers {
		if l == i {
			return false
		}
	}
	step := 1
	if m.DecoderSparseStep != nil {
		step = *m.DecoderSparseStep
	}
	return step > 0 && (i+1)%step == 0
}

// Routing is the router's top-k rule; normDefault is the model's norm_topk_prob when
// config.json does not set it (transformers: false for qwen3_moe, true for qwen3_next).
func (m MoEConfig) Routing(normDefault bool) compute.Routing {
	norm := normDefault
	if m.NormTopK != nil {
		norm = *m.NormTopK
	}
	return compute.Routing{TopK: m.TopK, NormTopK: norm}
}

// New binds a Qwen3-MoE checkpoint.
func New(l *model.Loader) (model.Network, error) {
	if err := compute.Supports[compute.MoEContext](l.Backend, "mixture-of-experts layers"); err != nil {
		return nil, err
	}
	moe, err := ReadMoEConfig(l.Config)
	if err != nil {
		return nil, err
	}
	if l.Has("model.layers.0.mlp.experts.0.up_proj.weight") {
		return nil, fmt.Errorf("the checkpoint is in Hugging Face's layout (one tensor per expert): convert it to the MLX layout with `mlxg create`")
	}
	rope, err := l.Config.RoPE()
	if err != nil {
		return nil, err
	}
	cfg := l.Config
	n := &Network{Eps: cfg.RMSNormEps}
	n.Embed = l.Linear("model.embed_tokens", cfg.VocabSize, cfg.HiddenSize)
	for i := 0; i < cfg.NumLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		layer := Layer{
			InputNorm: l.Vector(p+"input_layernorm.weight", cfg.HiddenSize),
			Attn:      qwen3.NewAttention(l, p+"self_attn.", rope),
			PostNorm:  l.Vector(p+"post_attention_layernorm.weight", cfg.HiddenSize),
		}
		if moe.Sparse(i) {
			layer.MoE = NewSparse(l, p+"mlp.", moe.NumExperts, moe.MoEIntermediate, moe.Routing(false))
		} else {
			layer.MLP = llama.NewMLP(l, p+"mlp.")
		}
		n.Layers = append(n.Layers, layer)
	}
	n.Norm = l.Vector("model.norm.weight", cfg.HiddenSize)
	n.Head = l.Head(n.Embed, cfg.VocabSize, cfg.HiddenSize)
	return n, nil
}

// Network is the decoder stack.
type Network struct {
	Embed  compute.Weight
	Layers []Layer
	Norm   compute.Vector
	Head   compute.Weight
	Eps    float32
}

// Layer is one decoder layer: attention, then either the expert block or a dense MLP.
type Layer struct {
	InputNorm compute.Vector
	Attn      *qwen3.Attention
	PostNorm  compute.Vector
	MoE       *Sparse    // mlp, on sparse layers
	MLP       *llama.MLP // mlp, on mlp_only_layers
}

// Forward implements model.Network.
func (n *Network) Forward(c compute.Context, tokens []int32, caches []kvstore.Layer, lastOnly bool) compute.Tensor {
	return n.ForwardBatch(c, model.Single(tokens, caches, lastOnly))
}

// ForwardBatch implements model.BatchNetwork: the tokens of every sequence are routed
// to the experts together.
func (n *Network) ForwardBatch(c compute.Context, b *model.Batch) compute.Tensor {
	h := c.Embed(n.Embed, b.Tokens())
	guesser, guess := compute.Ext[compute.ExpertGuesser](c)
	for i, layer := range n.Layers {
		h = c.Add(h, layer.Attn.Forward(c, c.RMSNorm(h, layer.InputNorm, n.Eps), b, i))
		x := c.RMSNorm(h, layer.PostNorm, n.Eps)
		if guess {
			n.guessNext(c, guesser, h, i)
		}
		if layer.MoE != nil {
			h = c.Add(h, layer.MoE.Forward(c, x))
		} else {
			h = c.Add(h, layer.MLP.Forward(c, x))
		}
		compute.Free(c, h)
	}
	return c.Linear(c.RMSNorm(b.Last(c, h), n.Norm, n.Eps), n.Head)
}

// guessNext lets a backend that streams experts start reading those the next sparse
// layer after layer i will probably pick: the residual stream h, before layer i's
// expert block adds to it, through that layer's norm and router. It changes what is
// read, never a result.
func (n *Network) guessNext(c compute.Context, g compute.ExpertGuesser, h compute.Tensor, i int) {
	for j := i + 1; j < len(n.Layers); j++ {
		if l := n.Layers[j]; l.MoE != nil {
			l.MoE.Guess(c, g, h, func() compute.Tensor { return c.RMSNorm(h, l.PostNorm, n.Eps) })
			return
		}
	}
}

// Sparse is the expert block: a router and the stacked SwiGLU experts.
type Sparse struct {
	Router         compute.Weight // mlp.gate: experts × hidden
	Gate, Up, Down compute.Weight // mlp.switch_mlp.*_proj, stacked
	Experts        int
	Routing        compute.Routing
	// OnRoute, when set, receives each call's router logits (tests compare the
	// experts they pick with the reference's).
	OnRoute func(c compute.Context, logits compute.Tensor)
}

// NewSparse binds the expert block at prefix (".../mlp.").
func NewSparse(l *model.Loader, prefix string, experts, inter int, r compute.Routing) *Sparse {
	h := l.Config.HiddenSize
	return &Sparse{
		Router:  l.Linear(prefix+"gate", experts, h),
		Gate:    l.Linear(prefix+"switch_mlp.gate_proj", experts*inter, h),
		Up:      l.Linear(prefix+"switch_mlp.up_proj", experts*inter, h),
		Down:    l.Linear(prefix+"switch_mlp.down_proj", experts*h, inter),
		Experts: experts,
		Routing: r,
	}
}

// Guess hands g the router's logits on norm() (the block's input norm of a residual
// stream h that has not reached the block yet) as a guess of the experts the block will
// pick, when g streams the block's experts and wants a guess for h's rows.
func (s *Sparse) Guess(c compute.Context, g compute.ExpertGuesser, h compute.Tensor, norm func() compute.Tensor) {
	if rows, _ := h.Dims(); !g.WantsExpertGuess(s.Gate, rows, s.Routing) {
		return
	}
	g.GuessExperts(c.Linear(norm(), s.Router), s.Gate, s.Experts, s.Routing)
}

// Forward computes the block.
func (s *Sparse) Forward(c compute.Context, x compute.Tensor) compute.Tensor {
	logits := c.Linear(x, s.Router)
	if s.OnRoute != nil {
		s.OnRoute(c, logits)
	}
	m, ok := compute.Ext[compute.MoEContext](c)
	if !ok {
		return compute.Unsupported(c, "mixture-of-experts layers")
	}
	return m.MoE(x, logits, s.Gate, s.Up, s.Down, s.Experts, s.Routing)
}
