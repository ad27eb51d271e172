// Package glm4moe is Zhipu's GLM mixture-of-experts architectures, as transformers'
// Glm4MoeForCausalLM and Glm4MoeLiteForCausalLM compute them:
//
//   - glm4_moe (GLM-4.5, GLM-4.5-Air, GLM-4.6, GLM-4.7): grouped-query attention with
//     biases on q, k and v (attention_bias), an optional per-head q/k RMSNorm
//     (use_qk_norm), RoPE over the first partial_rotary_factor of each head ("rotate
//     half" pairs);
//   - glm4_moe_lite (GLM-4.7-Flash): DeepSeek-V2/V3's multi-head latent attention (lite.go);
//
// and in both, pre-norm decoder layers whose MLP is dense on the first
// first_k_dense_replace layers and elsewhere a DeepSeek-V3 expert block: a router
// without bias whose sigmoid scores, plus e_score_correction_bias, pick
// num_experts_per_tok of n_routed_experts among the topk_group best of n_group groups
// (compute.Routing's sigmoid router), weighted by the unbiased scores (renormalised when
// norm_topk_prob) times routed_scaling_factor, beside n_shared_experts shared experts
// (one SwiGLU MLP of n_shared_experts·moe_intermediate_size) that every token runs.
//
// Weights are read as mlx-lm stores them: experts stacked under
// mlp.switch_mlp.{gate,up,down}_proj, the router as mlp.gate with its
// e_score_correction_bias, the shared experts under mlp.shared_experts. The multi-token
// prediction layer GLM checkpoints carry after the last layer (model.layers.N for N =
// num_hidden_layers) is never bound; `mlxg create` leaves it out.
package glm4moe

import (
	"encoding/json"
	"fmt"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/llama"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/qwen3"
)

func init() {
	model.Register("glm4_moe", New)
	model.Register("glm4_moe_lite", NewLite)
}

// MoEConfig is the expert part of config.json, shared by both architectures.
type MoEConfig struct {
	Experts         int      `json:"n_routed_experts"`
	LocalExperts    int      `json:"num_local_experts"` // transformers' alias of n_routed_experts
	TopK            int      `json:"num_experts_per_tok"`
	MoEIntermediate int      `json:"moe_intermediate_size"`
	SharedExperts   *int     `json:"n_shared_experts"`
	ScalingFactor   *float32 `json:"routed_scaling_factor"`
	Groups          int      `json:"n_group"`
	TopKGroups      int      `json:"topk_group"`
	NormTopK        *bool    `json:"norm_topk_prob"`
	FirstDense      *int     `json:"first_k_dense_replace"`
	LayerFreq       int      `json:"moe_layer_freq"`
	MLPLayerTypes   []string `json:"mlp_layer_types"`
	TopKMethod      string   `json:"topk_method"`
	ScoringFunc     string   `json:"scoring_func"`
	UseQKNorm       bool     `json:"use_qk_norm"`
}

// ReadMoEConfig reads and checks the expert fields of cfg.
func ReadMoEConfig(cfg *model.Config) (MoEConfig, error) {
	var m MoEConfig
	raw, err := json.Marshal(cfg.Raw)
	if err == nil {
		err = json.Unmarshal(raw, &m)
	}
	if err != nil {
		return m, fmt.Errorf("config.json: %w", err)
	}
	if m.Experts == 0 {
		m.Experts = m.LocalExperts
	}
	if m.Experts <= 0 || m.TopK <= 0 || m.TopK > m.Experts || m.MoEIntermediate <= 0 {
		return m, fmt.Errorf("config.json: n_routed_experts (%d), num_experts_per_tok (%d) and moe_intermediate_size (%d) must be positive, with num_experts_per_tok <= n_routed_experts",
			m.Experts, m.TopK, m.MoEIntermediate)
	}
	if m.TopKMethod != "" && m.TopKMethod != "noaux_tc" {
		return m, fmt.Errorf("config.json: topk_method %q is not supported (noaux_tc)", m.TopKMethod)
	}
	if m.ScoringFunc != "" && m.ScoringFunc != "sigmoid" {
		return m, fmt.Errorf("config.json: scoring_func %q is not supported (sigmoid)", m.ScoringFunc)
	}
	if len(m.MLPLayerTypes) > 0 && len(m.MLPLayerTypes) != cfg.NumLayers {
		return m, fmt.Errorf("config.json: mlp_layer_types has %d entries for %d layers", len(m.MLPLayerTypes), cfg.NumLayers)
	}
	if err := m.Routing(nil).Check(m.Experts); err != nil {
		return m, fmt.Errorf("config.json: %w", err)
	}
	return m, nil
}

// Sparse reports whether layer i has the expert block: mlp_layer_types when config.json
// lists them, else every layer from first_k_dense_replace (default 1) on that
// moe_layer_freq (default 1) divides.
func (m MoEConfig) Sparse(i int) bool {
	if len(m.MLPLayerTypes) > 0 {
		return m.MLPLayerTypes[i] == "sparse"
	}
	first := 1
	if m.FirstDense != nil {
		first = *m.FirstDense
	}
	return i >= first && (m.LayerFreq <= 1 || i%m.LayerFreq == 0)
}

// Shared is the shared experts' count (n_shared_experts, default 1).
func (m MoEConfig) Shared() int {
	if m.SharedExperts == nil {
		return 1
	}
	return *m.SharedExperts
}

// Routing is the sigmoid router with the layer's correction bias.
func (m MoEConfig) Routing(bias []float32) compute.Routing {
	r := compute.Routing{TopK: m.TopK, NormTopK: true, Sigmoid: true, Bias: bias, Groups: m.Groups, TopKGroups: m.TopKGroups, Scale: 1}
	if m.NormTopK != nil {
		r.NormTopK = *m.NormTopK
	}
	if m.ScalingFactor != nil {
		r.Scale = *m.ScalingFactor
	}
	return r
}

// New binds a glm4_moe checkpoint.
func New(l *model.Loader) (model.Network, error) {
	moe, err := checkMoE(l)
	if err != nil {
		return nil, err
	}
	rope, err := l.Config.RoPE()
	if err != nil {
		return nil, err
	}
	return newNetwork(l, moe, func(p string) llama.Mixer {
		if moe.UseQKNorm {
			return qwen3.NewAttention(l, p, rope)
		}
		return llama.NewAttention(l, p, rope)
	}), nil
}

// checkMoE checks what both architectures need of the backend and the checkpoint.
func checkMoE(l *model.Loader) (MoEConfig, error) {
	if err := compute.Supports[compute.SigmoidMoEContext](l.Backend, "the sigmoid expert router (DeepSeek-V3, GLM)"); err != nil {
		return MoEConfig{}, err
	}
	moe, err := ReadMoEConfig(l.Config)
	if err != nil {
		return moe, err
	}
	for i := 0; i < l.Config.NumLayers; i++ {
		if moe.Sparse(i) && l.Has(fmt.Sprintf("model.layers.%d.mlp.experts.0.up_proj.weight", i)) {
			return moe, fmt.Errorf("the checkpoint is in Hugging Face's layout (one tensor per expert): convert it to the MLX layout with `mlxg create`")
		}
	}
	return moe, nil
}

// newNetwork binds the decoder stack with attn binding each layer's attention.
func newNetwork(l *model.Loader, moe MoEConfig, attn func(prefix string) llama.Mixer) *Network {
	cfg := l.Config
	n := &Network{Eps: cfg.RMSNormEps, KVHeads: cfg.NumKVHeads, HeadDim: cfg.HeadDim}
	n.Embed = l.Linear("model.embed_tokens", cfg.VocabSize, cfg.HiddenSize)
	for i := 0; i < cfg.NumLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		layer := Layer{
			InputNorm: l.Vector(p+"input_layernorm.weight", cfg.HiddenSize),
			Attn:      attn(p + "self_attn."),
			PostNorm:  l.Vector(p+"post_attention_layernorm.weight", cfg.HiddenSize),
		}
		if moe.Sparse(i) {
			layer.MoE = NewMoE(l, p+"mlp.", moe)
		} else {
			layer.MLP = llama.NewMLP(l, p+"mlp.")
		}
		n.Layers = append(n.Layers, layer)
	}
	n.Norm = l.Vector("model.norm.weight", cfg.HiddenSize)
	n.Head = l.Head(n.Embed, cfg.VocabSize, cfg.HiddenSize)
	return n
}

// Network is the decoder stack.
type Network struct {
	Embed  compute.Weight // model.embed_tokens
	Layers []Layer
	Norm   compute.Vector // model.norm
	Head   compute.Weight // lm_head
	Eps    float32
	// Latent, for glm4_moe_lite, makes each layer's cache a latent one (NewCaches);
	// glm4_moe's are KVHeads of HeadDim.
	Latent           *LatentShape
	KVHeads, HeadDim int
}

// Layer is one decoder layer: attention, then the expert block or a dense MLP.
type Layer struct {
	InputNorm compute.Vector // input_layernorm
	Attn      llama.Mixer    // self_attn
	PostNorm  compute.Vector // post_attention_layernorm
	MoE       *MoE           // mlp, on sparse layers
	MLP       *llama.MLP     // mlp, on the dense layers
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

// guessNext lets a backend that streams experts read ahead those the next sparse layer
// after layer i will probably pick (its router on h before layer i's MLP adds to it).
func (n *Network) guessNext(c compute.Context, g compute.ExpertGuesser, h compute.Tensor, i int) {
	for j := i + 1; j < len(n.Layers); j++ {
		if l := n.Layers[j]; l.MoE != nil {
			l.MoE.Guess(c, g, h, func() compute.Tensor { return c.RMSNorm(h, l.PostNorm, n.Eps) })
			return
		}
	}
}

// MoE is the expert block: the sigmoid router, the stacked routed experts and the
// shared experts.
type MoE struct {
	Router         compute.Weight // mlp.gate: experts × hidden
	Gate, Up, Down compute.Weight // mlp.switch_mlp.*_proj, stacked
	Shared         *llama.MLP     // mlp.shared_experts; nil without shared experts
	Experts        int
	Routing        compute.Routing // with mlp.gate.e_score_correction_bias
}

// NewMoE binds the block at prefix (".../mlp.").
func NewMoE(l *model.Loader, prefix string, m MoEConfig) *MoE {
	h, inter := l.Config.HiddenSize, m.MoEIntermediate
	e := &MoE{
		Router:  l.Linear(prefix+"gate", m.Experts, h),
		Gate:    l.Linear(prefix+"switch_mlp.gate_proj", m.Experts*inter, h),
		Up:      l.Linear(prefix+"switch_mlp.up_proj", m.Experts*inter, h),
		Down:    l.Linear(prefix+"switch_mlp.down_proj", m.Experts*h, inter),
		Experts: m.Experts,
	}
	var bias []float32
	if name := prefix + "gate.e_score_correction_bias"; l.Has(name) {
		bias = l.Floats(name, m.Experts)
	}
	e.Routing = m.Routing(bias)
	if s := m.Shared(); s > 0 {
		p := prefix + "shared_experts."
		e.Shared = &llama.MLP{
			Gate: l.Linear(p+"gate_proj", s*inter, h),
			Up:   l.Linear(p+"up_proj", s*inter, h),
			Down: l.Linear(p+"down_proj", h, s*inter),
		}
	}
	return e
}

// Guess hands g the router's logits on norm() as a guess of the experts the block will
// pick, when g streams them and wants a guess for h's rows.
func (e *MoE) Guess(c compute.Context, g compute.ExpertGuesser, h compute.Tensor, norm func() compute.Tensor) {
	if rows, _ := h.Dims(); !g.WantsExpertGuess(e.Gate, rows, e.Routing) {
		return
	}
	g.GuessExperts(c.Linear(norm(), e.Router), e.Gate, e.Experts, e.Routing)
}

// Forward computes the block: the routed experts' weighted sum plus the shared experts.
func (e *MoE) Forward(c compute.Context, x compute.Tensor) compute.Tensor {
	m, ok := compute.Ext[compute.SigmoidMoEContext](c)
	if !ok {
		return compute.Unsupported(c, "the sigmoid expert router")
	}
	y := m.SigmoidMoE(x, c.Linear(x, e.Router), e.Gate, e.Up, e.Down, e.Experts, e.Routing)
	if e.Shared != nil {
		y = c.Add(y, e.Shared.Forward(c, x))
	}
	return y
}
