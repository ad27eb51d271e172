// Package gemma4 is the Gemma 4 text architecture (model_type "gemma4_text"; and
// "gemma4" and "gemma4_unified", the multimodal checkpoints, whose language model is
// read from text_config and the language_model.* weights, the vision tower read by
// vision.go, the audio tower ignored), as transformers' Gemma4ForCausalLM computes it:
//   - embeddings scaled by sqrt(hidden_size); every RMSNorm scales by w (not 1 + w, as
//     Gemma 3), in float32;
//   - four norms per layer as Gemma 3: input, post-attention, pre-feedforward and
//     post-feedforward;
//   - attention with per-head q/k norms, a value norm without a learned scale and an
//     attention scale of 1; layers of two kinds (layer_types, else five sliding to one
//     full, the last layer full): sliding layers of head_dim over a window of
//     sliding_window positions with rope_parameters.sliding_attention, full layers of
//     global_head_dim with rope_parameters.full_attention (Gemma 4's "proportional"
//     RoPE: a quarter of the head's frequency pairs rotate); with attention_k_eq_v the
//     full layers have num_global_key_value_heads and no v_proj, their values the
//     keys' projection before the key norm;
//   - the last num_kv_shared_layers layers project no keys or values: each attends over
//     the cache of the last earlier layer of its kind (kvstore.Shared in its own slot, so
//     the KV lives once); their MLP is twice as wide with use_double_wide_mlp;
//   - a GELU (tanh) gated MLP; with enable_moe_block a mixture of experts beside it on
//     every layer (a router on the unscaled norm of the residual stream times
//     router.scale and hidden_size^-0.5, softmax, top top_k_experts renormalised and
//     multiplied by router.per_expert_scale; GELU-gated experts; the two branches'
//     own post-norms summed);
//   - per-layer embeddings (E2B, E4B: hidden_size_per_layer_input): a second embedding
//     of every layer's slice per token, scaled by its width's square root, plus a
//     projection of the embeddings scaled by hidden_size^-0.5 and normed per slice, the
//     two summed and scaled by 2^-0.5; each layer gates its slice with GELU of a
//     projection of its output, projects it back, norms it and adds it;
//   - each layer's output multiplied by its layer_scalar; final_logit_softcapping.
//
// Weights are read as mlx-lm and mlx-vlm store them (language_model.model.* for the
// multimodal checkpoints, model.* for gemma4_text; the experts stacked under
// experts.switch_glu; also mlx-lm's older layout, language_model.* with the per-layer
// table cut into one per layer); `mlxg create` converts Hugging Face's layout (fused
// experts.gate_up_proj) into it, and a dense Hugging Face checkpoint loads as it is.
package gemma4

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
)

func init() {
	model.Register("gemma4_text", New)
	model.Register("gemma4", New)
	model.Register("gemma4_unified", New)
	for _, t := range []string{"gemma4_text", "gemma4", "gemma4_unified"} {
		model.RegisterKVSources(t, kvSources)
	}
}

// Config is the Gemma 4 part of config.json (text_config's, for the multimodal types).
type Config struct {
	HeadDim               int                       `json:"head_dim"`
	GlobalHeadDim         int                       `json:"global_head_dim"`
	GlobalKVHeads         *int                      `json:"num_global_key_value_heads"`
	AttentionKEqV         bool                      `json:"attention_k_eq_v"`
	NumKVSharedLayers     int                       `json:"num_kv_shared_layers"`
	PerLayerInput         int                       `json:"hidden_size_per_layer_input"`
	PerLayerVocab         int                       `json:"vocab_size_per_layer_input"`
	SlidingWindow         int                       `json:"sliding_window"`
	LayerTypes            []string                  `json:"layer_types"`
	RopeParameters        map[string]map[string]any `json:"rope_parameters"`
	FinalLogitSoftcapping *float64                  `json:"final_logit_softcapping"`
	HiddenActivation      string                    `json:"hidden_activation"`
	DoubleWideMLP         bool                      `json:"use_double_wide_mlp"`
	EnableMoE             bool                      `json:"enable_moe_block"`
	NumExperts            int                       `json:"num_experts"`
	TopKExperts           int                       `json:"top_k_experts"`
	MoEIntermediate       int                       `json:"moe_intermediate_size"`
	Bidirectional         *string                   `json:"use_bidirectional_attention"`
	Pad                   int32                     `json:"pad_token_id"`
}

// ReadConfig reads and checks the Gemma 4 fields of cfg.
func ReadConfig(cfg *model.Config) (Config, error) {
	var g Config
	raw, err := json.Marshal(cfg.Raw)
	if err == nil {
		err = json.Unmarshal(raw, &g)
	}
	if err != nil {
		return g, fmt.Errorf("config.json: %w", err)
	}
	if g.HiddenActivation != "" && g.HiddenActivation != "gelu_pytorch_tanh" {
		return g, fmt.Errorf("config.json: hidden_activation %q is not supported (gelu_pytorch_tanh)", g.HiddenActivation)
	}
	if g.Bidirectional != nil && *g.Bidirectional == "all" {
		return g, fmt.Errorf("config.json: use_bidirectional_attention \"all\" (an encoder) is not supported")
	}
	if g.NumKVSharedLayers < 0 || g.NumKVSharedLayers >= cfg.NumLayers {
		return g, fmt.Errorf("config.json: num_kv_shared_layers %d must be below num_hidden_layers %d", g.NumKVSharedLayers, cfg.NumLayers)
	}
	if g.EnableMoE && (g.NumExperts <= 0 || g.TopKExperts <= 0 || g.TopKExperts > g.NumExperts || g.MoEIntermediate <= 0) {
		return g, fmt.Errorf("config.json: enable_moe_block needs num_experts, top_k_experts (at most num_experts) and moe_intermediate_size, got %d, %d, %d",
			g.NumExperts, g.TopKExperts, g.MoEIntermediate)
	}
	if g.PerLayerInput > 0 && g.PerLayerVocab <= 0 {
		g.PerLayerVocab = cfg.VocabSize
	}
	return g, nil
}

// Sliding reports which layers use the sliding window: layer_types, else five sliding
// layers to one full one with the last layer full (transformers' default).
func (g Config) Sliding(layers int) ([]bool, error) {
	out := make([]bool, layers)
	if len(g.LayerTypes) > 0 && len(g.LayerTypes) != layers {
		return nil, fmt.Errorf("config.json: layer_types has %d entries for %d layers", len(g.LayerTypes), layers)
	}
	for i := range out {
		if len(g.LayerTypes) == 0 {
			out[i] = (i+1)%6 != 0 && i != layers-1
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

// kvSources is the layer whose KV each layer of the model with config cfg attends over
// (model.RegisterKVSources).
func kvSources(cfg *model.Config) ([]int, error) {
	g, err := ReadConfig(cfg)
	if err != nil {
		return nil, err
	}
	sliding, err := g.Sliding(cfg.NumLayers)
	if err != nil {
		return nil, err
	}
	return g.Sources(sliding)
}

// Sources is the layer whose KV each layer attends over: itself, or for the last
// num_kv_shared_layers layers the last earlier layer of the same kind.
func (g Config) Sources(sliding []bool) ([]int, error) {
	n := len(sliding)
	first := n - g.NumKVSharedLayers
	src := make([]int, n)
	for i := range src {
		src[i] = i
		if i < first {
			continue
		}
		src[i] = -1
		for j := first - 1; j >= 0; j-- {
			if sliding[j] == sliding[i] {
				src[i] = j
				break
			}
		}
		if src[i] < 0 {
			return nil, fmt.Errorf("config.json: layer %d shares the KV of an earlier layer of its kind, but none of the first %d layers is one", i, first)
		}
	}
	return src, nil
}

// New binds a Gemma 4 checkpoint.
func New(l *model.Loader) (model.Network, error) {
	if err := compute.Supports[compute.ActivationContext](l.Backend, "Gemma's GELU and soft-capping"); err != nil {
		return nil, err
	}
	cfg := l.Config
	g, err := ReadConfig(cfg)
	if err != nil {
		return nil, err
	}
	sliding, err := g.Sliding(cfg.NumLayers)
	if err != nil {
		return nil, err
	}
	src, err := g.Sources(sliding)
	if err != nil {
		return nil, err
	}
	if g.NumKVSharedLayers > 0 {
		if err := compute.Supports[compute.SharedKVContext](l.Backend, "Gemma 4's KV-shared layers"); err != nil {
			return nil, err
		}
	}
	if g.EnableMoE {
		if err := compute.Supports[compute.GeGLUMoEContext](l.Backend, "Gemma 4's experts"); err != nil {
			return nil, err
		}
	}
	if g.PerLayerInput > 0 {
		if err := compute.Supports[compute.LinearAttentionContext](l.Backend, "Gemma 4's per-layer embeddings (column slices)"); err != nil {
			return nil, err
		}
	}
	local, err := model.LayerRoPE(g.RopeParameters["sliding_attention"], cfg.HeadDim, cfg.MaxPositions, 1e4)
	if err != nil {
		return nil, fmt.Errorf("sliding-window layers: %w", err)
	}
	globalDim := cfg.HeadDim
	if g.GlobalHeadDim > 0 {
		globalDim = g.GlobalHeadDim
	}
	fullParams := g.RopeParameters["full_attention"]
	if fullParams == nil { // transformers' default
		fullParams = map[string]any{"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6}
	}
	global, err := model.LayerRoPE(fullParams, globalDim, cfg.MaxPositions, 1e6)
	if err != nil {
		return nil, fmt.Errorf("full-attention layers: %w", err)
	}

	h := cfg.HiddenSize
	n := &Network{Eps: cfg.RMSNormEps, EmbedScale: float32(math.Sqrt(float64(h))), Sources: src}
	if c := g.FinalLogitSoftcapping; c != nil && *c > 0 {
		n.SoftCap = float32(*c)
	}
	// Where the language model lies: mlx-vlm's (and mlx-lm's) multimodal layout, mlx-lm's
	// older one without the inner model., Hugging Face's multimodal layout, or the text
	// model's own.
	base, head := "model.", "lm_head"
	switch {
	case l.Has("language_model.model.embed_tokens.weight"):
		base, head = "language_model.model.", "language_model.lm_head"
	case l.Has("language_model.embed_tokens.weight"):
		base, head = "language_model.", "language_model.lm_head"
	case l.Has("model.language_model.embed_tokens.weight"):
		base, head = "model.language_model.", "lm_head"
	}
	if g.EnableMoE && l.Has(base+"layers.0.experts.gate_up_proj") {
		return nil, fmt.Errorf("the checkpoint is in Hugging Face's layout (fused experts.gate_up_proj): convert it to the MLX layout with `mlxg create`")
	}
	n.Embed = l.Linear(base+"embed_tokens", cfg.VocabSize, h)
	if p := g.PerLayerInput; p > 0 {
		L := cfg.NumLayers
		n.PerLayer = &PerLayer{
			Projection: l.Linear(base+"per_layer_model_projection", L*p, h),
			Norm:       l.Vector(base+"per_layer_projection_norm.weight", p),
			Width:      p, Layers: L, Vocab: g.PerLayerVocab,
			EmbedScale: float32(math.Sqrt(float64(p))),
			ProjScale:  float32(1 / math.Sqrt(float64(h))),
		}
		if l.Has(base + "embed_tokens_per_layer.0.weight") {
			// mlx-lm's older layout: the table cut into one per layer (Metal's buffers
			// stop at 4 GB).
			for i := 0; i < L; i++ {
				n.PerLayer.Tables = append(n.PerLayer.Tables, l.Linear(fmt.Sprintf("%sembed_tokens_per_layer.%d", base, i), g.PerLayerVocab, p))
			}
		} else {
			n.PerLayer.Embed = l.Linear(base+"embed_tokens_per_layer", g.PerLayerVocab, L*p)
		}
	}
	ones := map[int]compute.Vector{} // the value norms' unit scales, one per head size
	one := func(size int) compute.Vector {
		if v, ok := ones[size]; ok {
			return v
		}
		ones[size] = l.Ones(size)
		return ones[size]
	}
	firstShared := cfg.NumLayers - g.NumKVSharedLayers
	for i := 0; i < cfg.NumLayers; i++ {
		p := fmt.Sprintf("%slayers.%d.", base, i)
		a := &Attention{Heads: cfg.NumHeads, KVHeads: cfg.NumKVHeads, HeadDim: cfg.HeadDim, RoPE: local, Eps: cfg.RMSNormEps, Source: src[i]}
		if sliding[i] {
			a.Window = g.SlidingWindow
		} else {
			a.HeadDim, a.RoPE = globalDim, global
			if g.AttentionKEqV && g.GlobalKVHeads != nil && *g.GlobalKVHeads > 0 {
				a.KVHeads = *g.GlobalKVHeads
			}
			a.KEqV = g.AttentionKEqV
		}
		hd := a.HeadDim
		if cfg.NumHeads%a.KVHeads != 0 {
			return nil, fmt.Errorf("config.json: layer %d has %d query heads over %d KV heads", i, cfg.NumHeads, a.KVHeads)
		}
		a.Q = l.Linear(p+"self_attn.q_proj", cfg.NumHeads*hd, h)
		a.QNorm = l.Vector(p+"self_attn.q_norm.weight", hd)
		if src[i] == i {
			a.K = l.Linear(p+"self_attn.k_proj", a.KVHeads*hd, h)
			a.KNorm = l.Vector(p+"self_attn.k_norm.weight", hd)
			if !a.KEqV {
				a.V = l.Linear(p+"self_attn.v_proj", a.KVHeads*hd, h)
			}
			a.VNorm = one(hd)
		}
		a.O = l.Linear(p+"self_attn.o_proj", h, cfg.NumHeads*hd)
		inter := cfg.IntermediateSize
		if g.DoubleWideMLP && i >= firstShared && g.NumKVSharedLayers > 0 {
			inter *= 2
		}
		layer := Layer{
			InputNorm:    l.Vector(p+"input_layernorm.weight", h),
			Attn:         a,
			PostAttnNorm: l.Vector(p+"post_attention_layernorm.weight", h),
			PreFFNorm:    l.Vector(p+"pre_feedforward_layernorm.weight", h),
			MLP: &MLP{
				Gate: l.Linear(p+"mlp.gate_proj", inter, h),
				Up:   l.Linear(p+"mlp.up_proj", inter, h),
				Down: l.Linear(p+"mlp.down_proj", h, inter),
			},
			PostFFNorm: l.Vector(p+"post_feedforward_layernorm.weight", h),
			Scalar:     1,
		}
		if g.EnableMoE {
			layer.Experts = NewExperts(l, p, g.NumExperts, g.MoEIntermediate, g.TopKExperts, cfg.RMSNormEps)
			layer.PostFFNorm1 = l.Vector(p+"post_feedforward_layernorm_1.weight", h)
			layer.PreFFNorm2 = l.Vector(p+"pre_feedforward_layernorm_2.weight", h)
			layer.PostFFNorm2 = l.Vector(p+"post_feedforward_layernorm_2.weight", h)
		}
		if pl := g.PerLayerInput; pl > 0 {
			layer.PerLayerGate = l.Linear(p+"per_layer_input_gate", pl, h)
			layer.PerLayerProj = l.Linear(p+"per_layer_projection", h, pl)
			layer.PostPerLayerNorm = l.Vector(p+"post_per_layer_input_norm.weight", h)
		}
		if l.Has(p + "layer_scalar") {
			if v := l.Floats(p+"layer_scalar", 1); len(v) == 1 {
				layer.Scalar = v[0]
			}
		}
		n.Layers = append(n.Layers, layer)
	}
	n.Norm = l.Vector(base+"norm.weight", h)
	n.Head = l.HeadAt(head, n.Embed, cfg.VocabSize, h)
	if cfg.ModelType != "gemma4_text" {
		if n.Tower, err = newTower(l); err != nil {
			return nil, fmt.Errorf("vision tower: %w", err)
		}
		if n.Tower != nil {
			n.ImageBidirectional = g.Bidirectional != nil && *g.Bidirectional == "vision"
			n.Pad = g.Pad
		}
	}
	return n, nil
}

// Network is the decoder stack.
type Network struct {
	Embed      compute.Weight // embed_tokens
	EmbedScale float32
	PerLayer   *PerLayer // per-layer embeddings; nil without them
	Layers     []Layer
	Norm       compute.Vector // norm
	Head       compute.Weight // lm_head, or the tied embeddings
	Eps        float32
	SoftCap    float32 // final_logit_softcapping; 0: none
	Sources    []int   // the layer whose KV each layer attends over
	Tower      *Tower  // the vision tower and projector (vision.go); nil: text only
	// ImageBidirectional: an image's rows attend to each other in both directions
	// (use_bidirectional_attention "vision").
	ImageBidirectional bool
	Pad                int32 // pad_token_id: the token an image row's per-layer input reads
}

// PerLayer is the per-layer embeddings' input side (E2B, E4B).
type PerLayer struct {
	Embed      compute.Weight   // embed_tokens_per_layer: vocab × layers·width
	Tables     []compute.Weight // or embed_tokens_per_layer.N: vocab × width each
	Projection compute.Weight   // per_layer_model_projection: layers·width × hidden
	Norm       compute.Vector   // per_layer_projection_norm, over one layer's slice
	Width      int              // hidden_size_per_layer_input
	Layers     int
	Vocab      int // vocab_size_per_layer_input
	EmbedScale float32
	ProjScale  float32
}

// Inputs returns every layer's per-layer input, side by side (T × layers·width), from
// the tokens and their embeddings as the first layer reads them (scaled).
func (p *PerLayer) Inputs(c compute.Context, x compute.ActivationContext, tokens []int32, embeds compute.Tensor, eps float32) compute.Tensor {
	var ids []int32 // a copy, when some token is one the per-layer table lacks
	for i, t := range tokens {
		if int(t) >= p.Vocab {
			if ids == nil {
				ids = slices.Clone(tokens)
			}
			ids[i] = 0 // its row 0, as mlx-lm reads it
		}
	}
	if ids == nil {
		ids = tokens
	}
	T := len(tokens)
	var tok compute.Tensor
	if p.Embed != nil {
		tok = c.Embed(p.Embed, ids)
	} else {
		cols, ok := compute.Ext[compute.LinearAttentionContext](c)
		if !ok {
			return compute.Unsupported(c, "Gemma 4's per-layer embeddings (column slices)")
		}
		parts := make([]compute.Tensor, len(p.Tables))
		for i, t := range p.Tables {
			parts[i] = c.Embed(t, ids)
		}
		tok = cols.ConcatCols(parts...)
	}
	tok = x.Scale(tok, p.EmbedScale)
	proj := x.Scale(c.Linear(embeds, p.Projection), p.ProjScale)
	proj = c.Reshape(c.RMSNorm(c.Reshape(proj, T*p.Layers, p.Width), p.Norm, eps), T, p.Layers*p.Width)
	return x.Scale(c.Add(proj, tok), float32(1/math.Sqrt2))
}

// Layer is one decoder layer.
type Layer struct {
	InputNorm, PostAttnNorm, PreFFNorm, PostFFNorm compute.Vector
	Attn                                           *Attention
	MLP                                            *MLP
	// The mixture of experts beside the MLP (26B-A4B); nil without it.
	Experts                              *Experts
	PostFFNorm1, PreFFNorm2, PostFFNorm2 compute.Vector
	// The per-layer input's gate (E2B, E4B); nil without it.
	PerLayerGate, PerLayerProj compute.Weight
	PostPerLayerNorm           compute.Vector
	Scalar                     float32 // layer_scalar
}

// MLP is the GELU-gated feed-forward block.
type MLP struct {
	Gate, Up, Down compute.Weight
}

// Forward computes the block.
func (m *MLP) Forward(c compute.Context, x compute.ActivationContext, in compute.Tensor) compute.Tensor {
	return c.Linear(x.GeGLU(c.Linear(in, m.Gate), c.Linear(in, m.Up)), m.Down)
}

// Attention is Gemma 4's attention block.
type Attention struct {
	Q, K, V, O          compute.Weight // V nil with attention_k_eq_v; K and V nil on a KV-shared layer
	QNorm, KNorm, VNorm compute.Vector // VNorm: ones (a norm without a learned scale)
	Heads, KVHeads      int
	HeadDim             int
	RoPE                *compute.RoPE
	Eps                 float32
	Window              int  // sliding_window on sliding layers, 0 on full ones
	KEqV                bool // values from the keys' projection
	Source              int  // the layer whose KV this one attends over (its own index, or an earlier layer's)
}

// Forward computes the block of layer i.
// With images, an image's rows attend to each other in both directions.
func (a *Attention) Forward(c compute.Context, in compute.Tensor, b *model.Batch, i int, images bool) compute.Tensor {
	T, _ := in.Dims()
	hd := a.HeadDim
	perHead := func(t compute.Tensor, heads int, w compute.Vector) compute.Tensor {
		return c.Reshape(c.RMSNorm(c.Reshape(t, T*heads, hd), w, a.Eps), T, heads*hd)
	}
	q := b.RoPE(c, perHead(c.Linear(in, a.Q), a.Heads, a.QNorm), a.RoPE, hd)
	var out compute.Tensor
	if a.Source != i {
		// The source layer's keys and values under the mask of its kind, image rows
		// included (transformers applies a KV-shared layer's mask as any other's).
		if images {
			out = b.ImageAttentionShared(c, q, a.Source, a.Heads, 1)
		} else {
			out = b.AttentionShared(c, q, a.Source, a.Heads, 1)
		}
	} else {
		kp := c.Linear(in, a.K)
		vp := kp
		if !a.KEqV {
			vp = c.Linear(in, a.V)
		}
		k := b.RoPE(c, perHead(kp, a.KVHeads, a.KNorm), a.RoPE, hd)
		if images {
			out = b.ImageAttention(c, q, k, perHead(vp, a.KVHeads, a.VNorm), i, a.Heads, 1)
		} else {
			out = b.Attention(c, q, k, perHead(vp, a.KVHeads, a.VNorm), i, a.Heads, 1)
		}
	}
	return c.Linear(out, a.O)
}

// Experts is the mixture of experts beside the MLP: the router and the stacked experts.
type Experts struct {
	RouterNorm  compute.Vector // router.scale (the norm itself has no learned scale)
	RouterScale float32        // hidden_size^-0.5
	Router      compute.Weight // router.proj
	Gate, Up    compute.Weight // experts.switch_glu.{gate,up}_proj, stacked
	Down        compute.Weight // experts.switch_glu.down_proj, stacked
	Experts     int
	Routing     compute.Routing // top_k_experts, renormalised, times router.per_expert_scale
	Eps         float32
}

// NewExperts binds the block of the layer at prefix (".../layers.N.").
func NewExperts(l *model.Loader, prefix string, experts, inter, topK int, eps float32) *Experts {
	h := l.Config.HiddenSize
	return &Experts{
		RouterNorm:  l.Vector(prefix+"router.scale", h),
		RouterScale: float32(1 / math.Sqrt(float64(h))),
		Router:      l.Linear(prefix+"router.proj", experts, h),
		Gate:        l.Linear(prefix+"experts.switch_glu.gate_proj", experts*inter, h),
		Up:          l.Linear(prefix+"experts.switch_glu.up_proj", experts*inter, h),
		Down:        l.Linear(prefix+"experts.switch_glu.down_proj", experts*h, inter),
		Experts:     experts,
		Routing:     compute.Routing{TopK: topK, NormTopK: true, Scales: l.Floats(prefix+"router.per_expert_scale", experts)},
		Eps:         eps,
	}
}

// Logits is the router's logits for the residual stream h.
func (e *Experts) Logits(c compute.Context, x compute.ActivationContext, h compute.Tensor) compute.Tensor {
	return c.Linear(x.Scale(c.RMSNorm(h, e.RouterNorm, e.Eps), e.RouterScale), e.Router)
}

// Guess hands g the router's logits on h as a guess of the experts the block will pick,
// when g streams them and wants a guess for h's rows.
func (e *Experts) Guess(c compute.Context, x compute.ActivationContext, g compute.ExpertGuesser, h compute.Tensor) {
	if rows, _ := h.Dims(); !g.WantsExpertGuess(e.Gate, rows, e.Routing) {
		return
	}
	g.GuessExperts(e.Logits(c, x, h), e.Gate, e.Experts, e.Routing)
}

// Forward computes the experts' sum for in (the pre-normed stream) routed by h.
func (e *Experts) Forward(c compute.Context, x compute.ActivationContext, h, in compute.Tensor) compute.Tensor {
	m, ok := compute.Ext[compute.GeGLUMoEContext](c)
	if !ok {
		return compute.Unsupported(c, "Gemma 4's experts")
	}
	return m.GeGLUMoE(in, e.Logits(c, x, h), e.Gate, e.Up, e.Down, e.Experts, e.Routing)
}

// Forward implements model.Network.
func (n *Network) Forward(c compute.Context, tokens []int32, caches []kvstore.Layer, lastOnly bool) compute.Tensor {
	return n.ForwardBatch(c, model.Single(tokens, caches, lastOnly))
}

// ForwardBatch implements model.BatchNetwork.
func (n *Network) ForwardBatch(c compute.Context, b *model.Batch) compute.Tensor {
	x, ok := compute.Ext[compute.ActivationContext](c)
	if !ok {
		return compute.Unsupported(c, "Gemma's GELU and soft-capping")
	}
	norm := func(t compute.Tensor, w compute.Vector) compute.Tensor { return c.RMSNorm(t, w, n.Eps) }
	// Token embeddings are scaled; an image's rows are its projected features as they are.
	scale := func(e compute.Tensor) compute.Tensor { return x.Scale(e, n.EmbedScale) }
	h := b.EmbedWith(c, n.Embed, scale)
	var pl compute.Tensor // every layer's per-layer input, side by side
	var cols compute.LinearAttentionContext
	if n.PerLayer != nil {
		if cols, ok = compute.Ext[compute.LinearAttentionContext](c); !ok {
			return compute.Unsupported(c, "Gemma 4's per-layer embeddings (column slices)")
		}
		// Image rows read the pad token's per-layer embedding and, like every row, the
		// projection of their input row (their features), as Gemma4Model computes them.
		tokens := b.Tokens()
		if slices.ContainsFunc(tokens, func(id int32) bool { return id >= model.MediaBase }) {
			tokens = slices.Clone(tokens)
			for i, id := range tokens {
				if id >= model.MediaBase {
					tokens[i] = n.Pad
				}
			}
		}
		pl = n.PerLayer.Inputs(c, x, tokens, h, n.Eps)
		if cc, ok := compute.Ext[compute.CarryContext](c); ok {
			pl = cc.Carry(pl) // a pipeline's later ranks read it too
		}
	}
	guesser, guess := compute.Ext[compute.ExpertGuesser](c)
	for i, l := range n.Layers {
		if w := l.Attn.Window; w > 0 {
			if err := b.CheckWindow(l.Attn.Source, w); err != nil {
				return compute.Fail(c, fmt.Errorf("gemma4: %w", err))
			}
		}
		a := l.Attn.Forward(c, norm(h, l.InputNorm), b, i, n.ImageBidirectional)
		h = c.Add(h, norm(a, l.PostAttnNorm))
		if guess && l.Experts != nil && i+1 < len(n.Layers) && n.Layers[i+1].Experts != nil {
			// The next layer's experts, guessed from the stream as its router would see
			// it but for that layer's attention (a streaming backend reads them ahead).
			n.Layers[i+1].Experts.Guess(c, x, guesser, h)
		}
		var m compute.Tensor
		if l.Experts != nil {
			m1 := norm(l.MLP.Forward(c, x, norm(h, l.PreFFNorm)), l.PostFFNorm1)
			m2 := norm(l.Experts.Forward(c, x, h, norm(h, l.PreFFNorm2)), l.PostFFNorm2)
			m = c.Add(m1, m2)
		} else {
			m = l.MLP.Forward(c, x, norm(h, l.PreFFNorm))
		}
		h = c.Add(h, norm(m, l.PostFFNorm))
		if pl != nil {
			w := n.PerLayer.Width
			g := x.GeGLU(c.Linear(h, l.PerLayerGate), cols.Cols(pl, i*w, w))
			h = c.Add(h, norm(c.Linear(g, l.PerLayerProj), l.PostPerLayerNorm))
		}
		if l.Scalar != 1 {
			h = x.Scale(h, l.Scalar)
		}
		if pl != nil {
			compute.Free(c, h, pl)
		} else {
			compute.Free(c, h)
		}
	}
	logits := c.Linear(norm(b.Last(c, h), n.Norm), n.Head)
	if n.SoftCap > 0 {
		logits = x.SoftCap(logits, n.SoftCap)
	}
	return logits
}

// CarriedCols is what a pipeline hands on beside the residual stream (runner/pipeline):
// every layer's per-layer input, computed on the first rank from the tokens and their
// embeddings; 0 without them.
func (n *Network) CarriedCols() int {
	if n.PerLayer == nil {
		return 0
	}
	return n.PerLayer.Layers * n.PerLayer.Width
}

// KVSource implements model.KVSharer.
func (n *Network) KVSource(layer int) int { return n.Sources[layer] }

// NewCaches implements model.CacheMaker: per sliding layer a cache that keeps the window
// (fp16 kvstore.Rotating; with fp32 a float32 cache that keeps every position and attends
// over the window), per full layer a full-attention cache, per KV-shared layer a
// kvstore.Shared of its source's.
func (n *Network) NewCaches(fp32 bool) ([]kvstore.Layer, error) {
	caches := make([]kvstore.Layer, len(n.Layers))
	for i, l := range n.Layers {
		a := l.Attn
		var err error
		switch {
		case a.Source != i:
			caches[i], err = kvstore.NewShared(caches[a.Source])
		case a.Window > 0 && fp32:
			caches[i], err = kvstore.NewFullWindow(a.KVHeads, a.HeadDim, a.HeadDim, true, a.Window)
		case a.Window > 0:
			caches[i], err = kvstore.NewRotating(a.KVHeads, a.HeadDim, a.HeadDim, a.Window, kvstore.SpecF16, 0)
		default:
			caches[i], err = kvstore.NewFull(a.KVHeads, a.HeadDim, a.HeadDim, fp32)
		}
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return caches, nil
}
