// Package qwen3next is the hybrid Qwen3-Next architecture (model_type "qwen3_next":
// Qwen3-Next-80B-A3B) and its successors Qwen3.5 and Qwen3.6 (model_type "qwen3_5",
// dense, and "qwen3_5_moe": Qwen3.5/3.6-35B-A3B and the like), as transformers'
// Qwen3NextForCausalLM and Qwen3.5's language model compute them.
//
// Three of every full_attention_interval layers (or as layer_types says) are Gated
// DeltaNet linear attention, whose cache is a fixed-size recurrent state (the causal
// convolution's window and a delta-rule matrix per value head, a kvstore.Recurrent
// carried in the layer's cache slot as a State); the others are gated full attention
// (a sigmoid gate per channel from a doubled q_proj, per-head q/k RMSNorm, RoPE over
// partial_rotary_factor of each head) with an ordinary KV cache. The MLP is
// Qwen3-MoE's expert block plus a shared expert scaled by sigmoid(shared_expert_gate),
// or a dense SwiGLU (mlp_only_layers, or every layer without num_experts).
//
// Weights are read in mlx-lm's layout, which `mlxg create` and mlx_lm.convert write
// from Hugging Face's: experts stacked under mlp.switch_mlp, conv1d as [C, K, 1], and
// the zero-centred RMSNorm weights (transformers scales by 1 + w) stored with the 1
// added, so that every norm is a plain RMSNorm (the gated norm of the linear layers is
// plain in both). Qwen3-Next projects the linear layers' inputs with in_proj_qkvz and
// in_proj_ba, grouped per key head; Qwen3.5/3.6 with separate in_proj_qkv, in_proj_z,
// in_proj_b and in_proj_a, and keeps its language model under language_model.* with
// its config.json fields in text_config.
package qwen3next

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/llama"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/qwen3moe"
	"github.com/mlxg/mlxg/vision"
)

func init() {
	model.Register("qwen3_next", New)
	model.Register("qwen3_5", New)
	model.Register("qwen3_5_moe", New)
}

// Config is the hybrid part of config.json.
type Config struct {
	LinearKHeads          int      `json:"linear_num_key_heads"`
	LinearVHeads          int      `json:"linear_num_value_heads"`
	LinearKHeadDim        int      `json:"linear_key_head_dim"`
	LinearVHeadDim        int      `json:"linear_value_head_dim"`
	ConvKernel            int      `json:"linear_conv_kernel_dim"`
	FullAttentionInterval int      `json:"full_attention_interval"`
	SharedExpertInter     int      `json:"shared_expert_intermediate_size"`
	AttentionBias         bool     `json:"attention_bias"`
	LayerTypes            []string `json:"layer_types"`
}

// linear reports whether layer i is a linear-attention layer.
func (c Config) linear(i int) bool {
	if len(c.LayerTypes) > 0 {
		return c.LayerTypes[i] == "linear_attention"
	}
	return (i+1)%c.FullAttentionInterval != 0
}

// New binds a Qwen3-Next checkpoint.
func New(l *model.Loader) (model.Network, error) {
	for _, err := range []error{
		compute.Supports[compute.MoEContext](l.Backend, "mixture-of-experts layers"),
		compute.Supports[compute.ActivationContext](l.Backend, "gated attention"),
		compute.Supports[compute.LinearAttentionContext](l.Backend, "Gated DeltaNet layers"),
	} {
		if err != nil {
			return nil, err
		}
	}
	cfg := l.Config
	var hc Config
	raw, _ := json.Marshal(cfg.Raw)
	if err := json.Unmarshal(raw, &hc); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	if hc.FullAttentionInterval == 0 {
		hc.FullAttentionInterval = 4
	}
	if hc.LinearKHeads <= 0 || hc.LinearVHeads <= 0 || hc.LinearVHeads%hc.LinearKHeads != 0 || hc.LinearKHeadDim <= 0 || hc.LinearVHeadDim <= 0 || hc.ConvKernel < 2 {
		return nil, fmt.Errorf("config.json: linear_num_key_heads (%d), linear_num_value_heads (%d, a multiple of the key heads), linear_key_head_dim (%d), linear_value_head_dim (%d) must be positive, and linear_conv_kernel_dim (%d) at least 2",
			hc.LinearKHeads, hc.LinearVHeads, hc.LinearKHeadDim, hc.LinearVHeadDim, hc.ConvKernel)
	}
	if len(hc.LayerTypes) > 0 && len(hc.LayerTypes) != cfg.NumLayers {
		return nil, fmt.Errorf("config.json: layer_types has %d entries for %d layers", len(hc.LayerTypes), cfg.NumLayers)
	}
	if hc.AttentionBias {
		return nil, fmt.Errorf("config.json: attention_bias is not supported for qwen3_next")
	}
	var moe qwen3moe.MoEConfig
	if hasExperts(cfg) {
		var err error
		if moe, err = qwen3moe.ReadMoEConfig(cfg); err != nil {
			return nil, err
		}
	}
	rope, err := cfg.RoPE()
	if err != nil {
		return nil, err
	}
	// mlx-lm keeps Qwen3.5/3.6's language model under language_model.
	base, head := "model.", "lm_head"
	if l.Has("language_model.model.embed_tokens.weight") {
		base, head = "language_model.model.", "language_model.lm_head"
	}
	if l.Has(base+"layers.0.mlp.experts.0.up_proj.weight") || l.Has(base+"layers.0.mlp.experts.gate_up_proj") || l.Has("model.language_model.embed_tokens.weight") {
		return nil, fmt.Errorf("the checkpoint is in Hugging Face's layout (per-expert or fused expert tensors, or model.language_model keys): convert it to the MLX layout (`mlxg create` for qwen3_next, mlx_lm.convert for qwen3_5)")
	}
	n := &Network{Eps: cfg.RMSNormEps, Config: hc, KVHeads: cfg.NumKVHeads, HeadDim: cfg.HeadDim}
	h := cfg.HiddenSize
	n.Embed = l.Linear(base+"embed_tokens", cfg.VocabSize, h)
	for i := 0; i < cfg.NumLayers; i++ {
		p := fmt.Sprintf("%slayers.%d.", base, i)
		layer := Layer{
			InputNorm: l.Vector(p+"input_layernorm.weight", h),
			PostNorm:  l.Vector(p+"post_attention_layernorm.weight", h),
		}
		if hc.linear(i) {
			layer.Linear = newDeltaNet(l, p+"linear_attn.", hc)
		} else {
			layer.Attn = newAttention(l, p+"self_attn.", rope)
		}
		if moe.NumExperts > 0 && moe.Sparse(i) {
			s := &Sparse{Sparse: qwen3moe.NewSparse(l, p+"mlp.", moe.NumExperts, moe.MoEIntermediate, moe.Routing(true))}
			if hc.SharedExpertInter > 0 {
				si := hc.SharedExpertInter
				s.Shared = &llama.MLP{
					Gate: l.Linear(p+"mlp.shared_expert.gate_proj", si, h),
					Up:   l.Linear(p+"mlp.shared_expert.up_proj", si, h),
					Down: l.Linear(p+"mlp.shared_expert.down_proj", h, si),
				}
				s.SharedGate = l.Linear(p+"mlp.shared_expert_gate", 1, h)
			}
			layer.MoE = s
		} else {
			layer.MLP = llama.NewMLP(l, p+"mlp.")
		}
		n.Layers = append(n.Layers, layer)
	}
	n.Norm = l.Vector(base+"norm.weight", h)
	n.Head = l.HeadAt(head, n.Embed, cfg.VocabSize, h)
	if cfg.ModelType == "qwen3_5" || cfg.ModelType == "qwen3_5_moe" {
		mr, err := readMRoPE(cfg, rope)
		if err != nil {
			return nil, err
		}
		for _, layer := range n.Layers {
			if layer.Attn != nil {
				layer.Attn.MRoPE = mr
			}
		}
		if n.Tower, err = newTower(l); err != nil {
			return nil, err
		}
		if n.Tower != nil && mr == nil {
			return nil, fmt.Errorf("config.json: the vision tower needs M-RoPE: rope_parameters.mrope_section covering the %d rotary frequencies", rope.Dims/2)
		}
	}
	return n, nil
}

// readMRoPE reads rope_parameters' mrope_section (transformers' default [11, 11, 10]
// when absent); Qwen3.5's rotary embedding interleaves the sections.
func readMRoPE(cfg *model.Config, rope *compute.RoPE) (*compute.MRoPE, error) {
	m := &compute.MRoPE{Section: [3]int{11, 11, 10}, Interleaved: true}
	given := false
	for _, key := range []string{"rope_parameters", "rope_scaling"} {
		var p struct {
			Section []int `json:"mrope_section"`
		}
		if raw, ok := cfg.Raw[key]; ok && json.Unmarshal(raw, &p) == nil && len(p.Section) > 0 {
			if len(p.Section) != 3 {
				return nil, fmt.Errorf("config.json: %s.mrope_section %v: want three sections", key, p.Section)
			}
			copy(m.Section[:], p.Section)
			given = true
			break
		}
	}
	if m.Section[0]+m.Section[1]+m.Section[2] != rope.Dims/2 {
		if !given {
			return nil, nil // a text-only configuration that never says: plain RoPE
		}
		return nil, fmt.Errorf("config.json: mrope_section %v does not cover the %d rotary frequencies", m.Section, rope.Dims/2)
	}
	return m, nil
}

// Processor implements model.VisionNetwork: nil without a tower.
func (n *Network) Processor() *vision.Processor {
	if n.Tower == nil {
		return nil
	}
	return n.Tower.processor
}

// EncodeImages implements model.VisionNetwork.
func (n *Network) EncodeImages(c compute.Context, images []*vision.Pixels) (compute.Tensor, [][3]int) {
	if n.Tower == nil {
		return compute.Unsupported(c, "images (the checkpoint has no vision tower)"), nil
	}
	return n.Tower.Encode(c, images)
}

// ImageTokenID implements model.VisionNetwork.
func (n *Network) ImageTokenID() int32 {
	if n.Tower == nil {
		return -1
	}
	return n.Tower.imageToken
}

// hasExperts reports whether config.json describes expert blocks (num_experts > 0).
func hasExperts(cfg *model.Config) bool {
	var m struct {
		N int `json:"num_experts"`
	}
	raw, _ := json.Marshal(cfg.Raw)
	json.Unmarshal(raw, &m)
	return m.N > 0
}

// Network is the hybrid decoder stack.
type Network struct {
	Embed            compute.Weight
	Layers           []Layer
	Norm             compute.Vector
	Head             compute.Weight
	Eps              float32
	Config           Config
	KVHeads, HeadDim int
	Tower            *Tower // Qwen3.5/3.6's vision tower; nil: text only
}

// Layer is one decoder layer: linear or full attention, then the MLP.
type Layer struct {
	InputNorm, PostNorm compute.Vector
	Linear              *DeltaNet  // linear_attn, on linear-attention layers
	Attn                *Attention // self_attn, on full-attention layers
	MoE                 *Sparse    // mlp, on sparse layers
	MLP                 *llama.MLP // mlp, on mlp_only_layers
}

// State is a linear-attention layer's cache: its recurrent state (the convolution
// window, then the delta-rule matrices) in the per-layer cache list. It holds no keys
// or values, so Append and Attend are errors.
type State struct{ *kvstore.Recurrent }

// RecurrentState implements model.RecurrentLayer.
func (s State) RecurrentState() *kvstore.Recurrent { return s.Recurrent }

// Dims implements kvstore.Layer: no KV heads.
func (State) Dims() (int, int, int) { return 0, 0, 0 }

// Append implements kvstore.Layer.
func (State) Append([]float32, []float32, int) error {
	return fmt.Errorf("qwen3next: a linear-attention layer's cache holds a recurrent state, not keys and values")
}

// Attend implements kvstore.Layer.
func (State) Attend(kvstore.Attention) error {
	return fmt.Errorf("qwen3next: a linear-attention layer's cache holds a recurrent state, not keys and values")
}

// StateSizes are the element counts of a linear-attention layer's state tensors.
func (c Config) StateSizes() []int {
	conv := (c.ConvKernel - 1) * (2*c.LinearKHeads*c.LinearKHeadDim + c.LinearVHeads*c.LinearVHeadDim)
	return []int{conv, c.LinearVHeads * c.LinearKHeadDim * c.LinearVHeadDim}
}

// NewCaches makes one sequence's caches: a State per linear-attention layer and a
// full-attention cache (fp16, or float32 when fp32) per attention layer.
func (n *Network) NewCaches(fp32 bool) ([]kvstore.Layer, error) {
	caches := make([]kvstore.Layer, len(n.Layers))
	for i, l := range n.Layers {
		if l.Linear != nil {
			r, err := kvstore.NewRecurrent(n.Config.StateSizes()...)
			if err != nil {
				return nil, err
			}
			caches[i] = State{r}
			continue
		}
		c, err := kvstore.NewFull(n.KVHeads, n.HeadDim, n.HeadDim, fp32)
		if err != nil {
			return nil, err
		}
		caches[i] = c
	}
	return caches, nil
}

// Forward implements model.Network.
func (n *Network) Forward(c compute.Context, tokens []int32, caches []kvstore.Layer, lastOnly bool) compute.Tensor {
	return n.ForwardBatch(c, model.Single(tokens, caches, lastOnly))
}

// ForwardBatch implements model.BatchNetwork: each sequence's linear-attention layers
// advance its own recurrent state.
func (n *Network) ForwardBatch(c compute.Context, b *model.Batch) compute.Tensor {
	h := b.Embed(c, n.Embed)
	guesser, guess := compute.Ext[compute.ExpertGuesser](c)
	for i, layer := range n.Layers {
		x := c.RMSNorm(h, layer.InputNorm, n.Eps)
		var a compute.Tensor
		if layer.Linear != nil {
			for s := range b.Seqs {
				if _, ok := b.Cache(s, i).(State); !ok {
					return compute.Fail(c, fmt.Errorf("qwen3next: layer %d is a linear-attention layer, but its cache is %T, not a recurrent State: make the caches with the model's NewCaches", i, b.Cache(s, i)))
				}
			}
			a = layer.Linear.Forward(c, x, b, i)
		} else {
			a = layer.Attn.Forward(c, x, b, i)
		}
		h = c.Add(h, a)
		x = c.RMSNorm(h, layer.PostNorm, n.Eps)
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
// layer after layer i will probably pick (qwen3moe.Network's guessNext).
func (n *Network) guessNext(c compute.Context, g compute.ExpertGuesser, h compute.Tensor, i int) {
	for j := i + 1; j < len(n.Layers); j++ {
		if l := n.Layers[j]; l.MoE != nil {
			l.MoE.Guess(c, g, h, func() compute.Tensor { return c.RMSNorm(h, l.PostNorm, n.Eps) })
			return
		}
	}
}

// Sparse is the expert block with its shared expert.
type Sparse struct {
	*qwen3moe.Sparse
	Shared     *llama.MLP     // mlp.shared_expert
	SharedGate compute.Weight // mlp.shared_expert_gate: 1 × hidden
}

// Forward computes the block.
func (s *Sparse) Forward(c compute.Context, x compute.Tensor) compute.Tensor {
	y := s.Sparse.Forward(c, x)
	if s.Shared == nil {
		return y
	}
	a, ok := compute.Ext[compute.ActivationContext](c)
	if !ok {
		return compute.Unsupported(c, "the shared expert's gate")
	}
	return c.Add(y, a.SigmoidMul(s.Shared.Forward(c, x), c.Linear(x, s.SharedGate)))
}

// Attention is the gated full attention.
type Attention struct {
	Q, K, V, O              compute.Weight // q_proj is heads × 2·head_dim: per head, the query then its gate
	QNorm, KNorm            compute.Vector
	Heads, KVHeads, HeadDim int
	RoPE                    *compute.RoPE
	MRoPE                   *compute.MRoPE // Qwen3.5/3.6's multimodal positions; nil: plain RoPE
	Eps                     float32
}

func newAttention(l *model.Loader, p string, rope *compute.RoPE) *Attention {
	cfg := l.Config
	hd := cfg.HeadDim
	a := &Attention{Heads: cfg.NumHeads, KVHeads: cfg.NumKVHeads, HeadDim: hd, RoPE: rope, Eps: cfg.RMSNormEps}
	a.Q = l.Linear(p+"q_proj", 2*a.Heads*hd, cfg.HiddenSize)
	a.K = l.Linear(p+"k_proj", a.KVHeads*hd, cfg.HiddenSize)
	a.V = l.Linear(p+"v_proj", a.KVHeads*hd, cfg.HiddenSize)
	a.O = l.Linear(p+"o_proj", cfg.HiddenSize, a.Heads*hd)
	a.QNorm = l.Vector(p+"q_norm.weight", hd)
	a.KNorm = l.Vector(p+"k_norm.weight", hd)
	return a
}

// Forward computes the block.
func (a *Attention) Forward(c compute.Context, x compute.Tensor, b *model.Batch, layer int) compute.Tensor {
	ext, ok1 := compute.Ext[compute.ActivationContext](c)
	lin, ok2 := compute.Ext[compute.LinearAttentionContext](c)
	if !ok1 || !ok2 {
		return compute.Unsupported(c, "gated attention")
	}
	T, _ := x.Dims()
	hd := a.HeadDim
	qg := c.Reshape(c.Linear(x, a.Q), T*a.Heads, 2*hd)
	q := c.Reshape(c.RMSNorm(lin.Cols(qg, 0, hd), a.QNorm, a.Eps), T, a.Heads*hd)
	gate := c.Reshape(lin.Cols(qg, hd, hd), T, a.Heads*hd)
	k := c.Reshape(c.RMSNorm(c.Reshape(c.Linear(x, a.K), T*a.KVHeads, hd), a.KNorm, a.Eps), T, a.KVHeads*hd)
	q = b.MRoPE(c, q, a.RoPE, a.MRoPE, hd)
	k = b.MRoPE(c, k, a.RoPE, a.MRoPE, hd)
	o := b.Attention(c, q, k, c.Linear(x, a.V), layer, a.Heads, llama.Scale(hd))
	return c.Linear(ext.SigmoidMul(o, gate), a.O)
}

// DeltaNet is the Gated DeltaNet linear attention.
type DeltaNet struct {
	// Qwen3-Next: in_proj_qkvz and in_proj_ba, grouped per key head.
	QKVZ, BA compute.Weight
	// Qwen3.5/3.6: in_proj_qkv ([q, k, v], the convolution's input as it is),
	// in_proj_z, in_proj_b and in_proj_a.
	QKV, Z, B, A           compute.Weight
	Conv                   compute.Weight // conv1d: C × K taps, C = 2·key_dim + value_dim
	ALog, DTBias           compute.Vector // A_log, dt_bias: per value head
	Norm                   compute.Vector // norm: the gated RMSNorm over a value head
	Out                    compute.Weight // out_proj
	KHeads, VHeads, DK, DV int
	Eps                    float32
}

func newDeltaNet(l *model.Loader, p string, hc Config) *DeltaNet {
	cfg := l.Config
	h := cfg.HiddenSize
	d := &DeltaNet{KHeads: hc.LinearKHeads, VHeads: hc.LinearVHeads, DK: hc.LinearKHeadDim, DV: hc.LinearVHeadDim, Eps: cfg.RMSNormEps}
	kd, vd := d.KHeads*d.DK, d.VHeads*d.DV
	conv := 2*kd + vd
	if l.Has(p + "in_proj_qkvz.weight") {
		d.QKVZ = l.Linear(p+"in_proj_qkvz", 2*kd+2*vd, h)
		d.BA = l.Linear(p+"in_proj_ba", 2*d.VHeads, h)
	} else {
		d.QKV = l.Linear(p+"in_proj_qkv", conv, h)
		d.Z = l.Linear(p+"in_proj_z", vd, h)
		d.B = l.Linear(p+"in_proj_b", d.VHeads, h)
		d.A = l.Linear(p+"in_proj_a", d.VHeads, h)
	}
	d.Conv = l.Linear(p+"conv1d", conv*hc.ConvKernel, 1) // mlx-lm's [C, K, 1]
	d.ALog = l.Vector(p+"A_log", d.VHeads)
	d.DTBias = l.Vector(p+"dt_bias", d.VHeads)
	d.Norm = l.Vector(p+"norm.weight", d.DV)
	d.Out = l.Linear(p+"out_proj", h, vd)
	return d
}

// Forward computes the block, reading and advancing each sequence's state of layer i:
// the projections run over every sequence's rows, the convolution and the delta rule
// per sequence.
func (d *DeltaNet) Forward(c compute.Context, x compute.Tensor, bt *model.Batch, i int) compute.Tensor {
	lin, ok := compute.Ext[compute.LinearAttentionContext](c)
	if !ok {
		return compute.Unsupported(c, "Gated DeltaNet layers")
	}
	T, _ := x.Dims()
	nk, nv, dk, dv := d.KHeads, d.VHeads, d.DK, d.DV
	var mixed, z, a, b compute.Tensor
	if d.QKVZ != nil {
		r := nv / nk // value heads per key head
		// in_proj_qkvz is, per key head, [q (dk), k (dk), v (r·dv), z (r·dv)]; in_proj_ba,
		// per key head, [b (r), a (r)].
		qkvz := c.Reshape(c.Linear(x, d.QKVZ), T*nk, 2*dk+2*r*dv)
		q := c.Reshape(lin.Cols(qkvz, 0, dk), T, nk*dk)
		k := c.Reshape(lin.Cols(qkvz, dk, dk), T, nk*dk)
		v := c.Reshape(lin.Cols(qkvz, 2*dk, r*dv), T, nv*dv)
		mixed = lin.ConcatCols(q, k, v)
		z = c.Reshape(lin.Cols(qkvz, 2*dk+r*dv, r*dv), T*nv, dv)
		ba := c.Reshape(c.Linear(x, d.BA), T*nk, 2*r)
		b = c.Reshape(lin.Cols(ba, 0, r), T, nv)
		a = c.Reshape(lin.Cols(ba, r, r), T, nv)
	} else {
		mixed = c.Linear(x, d.QKV)
		z = c.Reshape(c.Linear(x, d.Z), T*nv, dv)
		b, a = c.Linear(x, d.B), c.Linear(x, d.A)
	}

	conv := bt.Each(c, func(s int) compute.Tensor {
		return lin.CausalConv1D(bt.Rows(c, mixed, s), d.Conv, bt.Cache(s, i).(State).State(0))
	})
	q := lin.Cols(conv, 0, nk*dk)
	k := lin.Cols(conv, nk*dk, nk*dk)
	v := lin.Cols(conv, 2*nk*dk, nv*dv)
	q = c.Reshape(lin.L2NormScale(c.Reshape(q, T*nk, dk), 1e-6, float32(1/math.Sqrt(float64(dk)))), T, nk*dk)
	k = c.Reshape(lin.L2NormScale(c.Reshape(k, T*nk, dk), 1e-6, 1), T, nk*dk)
	g, beta := lin.DeltaGates(a, b, d.ALog, d.DTBias)
	o := bt.Each(c, func(s int) compute.Tensor {
		st := bt.Cache(s, i).(State)
		o := lin.GatedDelta(bt.Rows(c, q, s), bt.Rows(c, k, s), bt.Rows(c, v, s), bt.Rows(c, g, s), bt.Rows(c, beta, s), nv, st.State(1))
		st.Advance(bt.Len(s))
		return o
	})
	o = c.SwiGLU(z, c.RMSNorm(c.Reshape(o, T*nv, dv), d.Norm, d.Eps)) // norm(o) · silu(z)
	return c.Linear(c.Reshape(o, T, nv*dv), d.Out)
}
