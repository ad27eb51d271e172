// Package gemma3 is the Gemma 3 architecture (model_type "gemma3_text": Gemma 3 270M
// and 1B; and "gemma3", the multimodal 4B, 12B and 27B, whose language model is read
// from text_config and the language_model.* weights, and whose vision tower, when the
// checkpoint holds it, reads images: vision.go), as transformers' Gemma3ForCausalLM
// computes it:
//   - embeddings scaled by sqrt(hidden_size);
//   - every RMSNorm scales by 1 + w (weights stored around 0), in float32;
//   - four norms per layer: input, post-attention (on the attention output, before
//     the residual add), pre-feedforward and post-feedforward;
//   - attention with per-head q/k norms, scale query_pre_attn_scalar^-0.5, on
//     sliding-window layers (layer_types, else every layer but each
//     sliding_window_pattern-th) a window of sliding_window positions and RoPE base
//     rope_local_base_freq, on global layers rope_theta with its rope_scaling;
//   - a GELU (tanh approximation) gated MLP;
//   - final_logit_softcapping when set. attn_logit_softcapping (Gemma 2) is refused.
//
// Sliding-window layers need a cache that keeps the window (kvstore.Rotating, which
// the KV policy makes for them); a cache that keeps every position is accepted only
// while the sequence fits in the window, where both give the same attention.
package gemma3

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
)

func init() {
	model.Register("gemma3_text", New)
	model.Register("gemma3", New)
}

// Config is the Gemma-specific part of config.json.
type Config struct {
	SlidingWindow         int             `json:"sliding_window"`
	SlidingWindowPattern  *int            `json:"sliding_window_pattern"`
	LayerTypes            []string        `json:"layer_types"`
	QueryPreAttnScalar    *float64        `json:"query_pre_attn_scalar"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeLocalBaseFreq     *float64        `json:"rope_local_base_freq"`
	RopeScaling           map[string]any  `json:"rope_scaling"`
	RopeParameters        map[string]any  `json:"rope_parameters"`
	FinalLogitSoftcapping *float64        `json:"final_logit_softcapping"`
	AttnLogitSoftcapping  *float64        `json:"attn_logit_softcapping"`
	HiddenActivation      string          `json:"hidden_activation"`
	TextConfig            json.RawMessage `json:"text_config"`
}

// New binds a Gemma 3 text checkpoint.
func New(l *model.Loader) (model.Network, error) {
	if err := compute.Supports[compute.ActivationContext](l.Backend, "Gemma's norms and GELU"); err != nil {
		return nil, err
	}
	cfg := l.Config
	var g Config
	raw, _ := json.Marshal(cfg.Raw)
	if err := json.Unmarshal(raw, &g); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	if g.AttnLogitSoftcapping != nil {
		return nil, fmt.Errorf("config.json sets attn_logit_softcapping (%v): attention soft-capping (Gemma 2) is not supported", *g.AttnLogitSoftcapping)
	}
	if g.HiddenActivation != "" && g.HiddenActivation != "gelu_pytorch_tanh" {
		return nil, fmt.Errorf("config.json: hidden_activation %q is not supported (gelu_pytorch_tanh)", g.HiddenActivation)
	}
	sliding, err := slidingLayers(g, cfg.NumLayers)
	if err != nil {
		return nil, err
	}
	global, local, err := ropes(cfg, g)
	if err != nil {
		return nil, err
	}
	scalar := 256.0 // transformers' and mlx-lm's default
	if g.QueryPreAttnScalar != nil {
		scalar = *g.QueryPreAttnScalar
	}
	n := &Network{Eps: cfg.RMSNormEps, EmbedScale: float32(math.Sqrt(float64(cfg.HiddenSize)))}
	if g.FinalLogitSoftcapping != nil && *g.FinalLogitSoftcapping > 0 {
		n.SoftCap = float32(*g.FinalLogitSoftcapping)
	}
	h, hd := cfg.HiddenSize, cfg.HeadDim
	// The multimodal models keep the language model under language_model.
	base, head := "model.", "lm_head"
	if l.Has("language_model.model.embed_tokens.weight") {
		base, head = "language_model.model.", "language_model.lm_head"
	}
	n.Embed = l.Linear(base+"embed_tokens", cfg.VocabSize, h)
	for i := 0; i < cfg.NumLayers; i++ {
		p := fmt.Sprintf("%slayers.%d.", base, i)
		a := &Attention{Heads: cfg.NumHeads, KVHeads: cfg.NumKVHeads, HeadDim: hd, RoPE: global,
			Scale: float32(1 / math.Sqrt(scalar)), Eps: cfg.RMSNormEps}
		if sliding[i] {
			a.RoPE, a.Window = local, g.SlidingWindow
		}
		a.Q = l.Linear(p+"self_attn.q_proj", a.Heads*hd, h)
		a.K = l.Linear(p+"self_attn.k_proj", a.KVHeads*hd, h)
		a.V = l.Linear(p+"self_attn.v_proj", a.KVHeads*hd, h)
		a.O = l.Linear(p+"self_attn.o_proj", h, a.Heads*hd)
		a.QNorm = l.Vector(p+"self_attn.q_norm.weight", hd)
		a.KNorm = l.Vector(p+"self_attn.k_norm.weight", hd)
		n.Layers = append(n.Layers, Layer{
			InputNorm:    l.Vector(p+"input_layernorm.weight", h),
			Attn:         a,
			PostAttnNorm: l.Vector(p+"post_attention_layernorm.weight", h),
			PreFFNorm:    l.Vector(p+"pre_feedforward_layernorm.weight", h),
			Gate:         l.Linear(p+"mlp.gate_proj", cfg.IntermediateSize, h),
			Up:           l.Linear(p+"mlp.up_proj", cfg.IntermediateSize, h),
			Down:         l.Linear(p+"mlp.down_proj", h, cfg.IntermediateSize),
			PostFFNorm:   l.Vector(p+"post_feedforward_layernorm.weight", h),
		})
	}
	n.Norm = l.Vector(base+"norm.weight", h)
	n.Head = l.HeadAt(head, n.Embed, cfg.VocabSize, h)
	if cfg.ModelType == "gemma3" {
		if err := l.Err(); err != nil {
			return nil, err
		}
		if n.Tower, err = newTower(l); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// slidingLayers reads which layers use the sliding window.
func slidingLayers(g Config, layers int) ([]bool, error) {
	out := make([]bool, layers)
	if len(g.LayerTypes) > 0 {
		if len(g.LayerTypes) != layers {
			return nil, fmt.Errorf("config.json: layer_types has %d entries for %d layers", len(g.LayerTypes), layers)
		}
		for i, t := range g.LayerTypes {
			switch t {
			case "sliding_attention":
				out[i] = true
			case "full_attention":
			default:
				return nil, fmt.Errorf("config.json: layer %d has layer type %q (full_attention or sliding_attention)", i, t)
			}
		}
	} else {
		pattern := 6 // transformers' and mlx-lm's default
		if g.SlidingWindowPattern != nil {
			pattern = *g.SlidingWindowPattern
		}
		for i := range out {
			out[i] = pattern > 1 && (i+1)%pattern != 0
		}
	}
	for _, s := range out {
		if s && g.SlidingWindow <= 0 {
			return nil, fmt.Errorf("config.json: sliding_window must be positive for sliding-window layers, got %d", g.SlidingWindow)
		}
	}
	return out, nil
}

// ropes builds the global and local rotary embeddings: from transformers 5's
// rope_parameters per layer type, else rope_theta with rope_scaling (global) and
// rope_local_base_freq (local).
func ropes(cfg *model.Config, g Config) (global, local *compute.RoPE, err error) {
	gp, lp := g.RopeScaling, map[string]any(nil)
	gTheta, lTheta := 1e6, 1e4 // transformers' Gemma3TextConfig defaults
	if g.RopeTheta != nil {
		gTheta = *g.RopeTheta
	}
	if g.RopeLocalBaseFreq != nil {
		lTheta = *g.RopeLocalBaseFreq
	}
	if full, ok := g.RopeParameters["full_attention"].(map[string]any); ok {
		gp = full
		if t, ok := full["rope_theta"].(float64); ok {
			gTheta = t
		}
	}
	if sl, ok := g.RopeParameters["sliding_attention"].(map[string]any); ok {
		lp = sl
		if t, ok := sl["rope_theta"].(float64); ok {
			lTheta = t
		}
	}
	if global, err = model.LayerRoPE(gp, cfg.HeadDim, cfg.MaxPositions, gTheta); err != nil {
		return nil, nil, fmt.Errorf("global layers: %w", err)
	}
	if local, err = model.LayerRoPE(lp, cfg.HeadDim, cfg.MaxPositions, lTheta); err != nil {
		return nil, nil, fmt.Errorf("sliding-window layers: %w", err)
	}
	return global, local, nil
}

// Network is the decoder stack.
type Network struct {
	Embed      compute.Weight
	EmbedScale float32
	Layers     []Layer
	Norm       compute.Vector
	Head       compute.Weight
	Eps        float32
	SoftCap    float32 // final_logit_softcapping; 0: none
	Tower      *Tower  // the vision tower and projector (vision.go); nil: text only
}

// Layer is one decoder layer.
type Layer struct {
	InputNorm, PostAttnNorm, PreFFNorm, PostFFNorm compute.Vector
	Attn                                           *Attention
	Gate, Up, Down                                 compute.Weight
}

// Attention is Gemma 3's attention block.
type Attention struct {
	Q, K, V, O              compute.Weight
	QNorm, KNorm            compute.Vector
	Heads, KVHeads, HeadDim int
	RoPE                    *compute.RoPE
	Scale, Eps              float32
	Window                  int // sliding_window on sliding layers, 0 on global ones
}

// Forward implements model.Network.
func (n *Network) Forward(c compute.Context, tokens []int32, caches []kvstore.Layer, lastOnly bool) compute.Tensor {
	return n.ForwardBatch(c, model.Single(tokens, caches, lastOnly))
}

// ForwardBatch implements model.BatchNetwork.
func (n *Network) ForwardBatch(c compute.Context, b *model.Batch) compute.Tensor {
	x, ok := compute.Ext[compute.ActivationContext](c)
	if !ok {
		return compute.Unsupported(c, "Gemma's norms and GELU")
	}
	norm := func(t compute.Tensor, w compute.Vector) compute.Tensor { return x.RMSNormOffset(t, w, 1, n.Eps) }
	// Token embeddings are scaled; an image's rows are its projected features as they are.
	h := b.EmbedWith(c, n.Embed, func(e compute.Tensor) compute.Tensor { return x.Scale(e, n.EmbedScale) })
	for i, l := range n.Layers {
		if w := l.Attn.Window; w > 0 {
			if err := b.CheckWindow(i, w); err != nil {
				return compute.Fail(c, fmt.Errorf("gemma3: %w", err))
			}
		}
		a := l.Attn.Forward(c, x, norm(h, l.InputNorm), b, i)
		h = c.Add(h, norm(a, l.PostAttnNorm))
		f := norm(h, l.PreFFNorm)
		m := c.Linear(x.GeGLU(c.Linear(f, l.Gate), c.Linear(f, l.Up)), l.Down)
		h = c.Add(h, norm(m, l.PostFFNorm))
		compute.Free(c, h)
	}
	logits := c.Linear(norm(b.Last(c, h), n.Norm), n.Head)
	if n.SoftCap > 0 {
		logits = x.SoftCap(logits, n.SoftCap)
	}
	return logits
}

// Forward computes the attention block.
func (a *Attention) Forward(c compute.Context, x compute.ActivationContext, in compute.Tensor, b *model.Batch, layer int) compute.Tensor {
	T, _ := in.Dims()
	hd := a.HeadDim
	q := c.Reshape(x.RMSNormOffset(c.Reshape(c.Linear(in, a.Q), T*a.Heads, hd), a.QNorm, 1, a.Eps), T, a.Heads*hd)
	k := c.Reshape(x.RMSNormOffset(c.Reshape(c.Linear(in, a.K), T*a.KVHeads, hd), a.KNorm, 1, a.Eps), T, a.KVHeads*hd)
	q = b.RoPE(c, q, a.RoPE, hd)
	k = b.RoPE(c, k, a.RoPE, hd)
	// An image's rows attend to each other in both directions, on sliding layers too.
	return c.Linear(b.ImageAttention(c, q, k, c.Linear(in, a.V), layer, a.Heads, a.Scale), a.O)
}

// NewCaches implements model.CacheMaker: a full-attention cache (fp16, or float32 when
// fp32) per global layer and a sliding-window cache (fp16) per sliding layer.
func (n *Network) NewCaches(fp32 bool) ([]kvstore.Layer, error) {
	caches := make([]kvstore.Layer, len(n.Layers))
	for i, l := range n.Layers {
		a := l.Attn
		var err error
		if a.Window > 0 {
			caches[i], err = kvstore.NewRotating(a.KVHeads, a.HeadDim, a.HeadDim, a.Window, kvstore.SpecF16, 0)
		} else {
			caches[i], err = kvstore.NewFull(a.KVHeads, a.HeadDim, a.HeadDim, fp32)
		}
		if err != nil {
			return nil, err
		}
	}
	return caches, nil
}
