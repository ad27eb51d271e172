package glm4moe

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/llama"
	"github.com/mlxg/mlxg/runner/model"
)

// LatentConfig is the multi-head latent attention part of config.json (glm4_moe_lite,
// as DeepSeek-V2/V3 define it).
type LatentConfig struct {
	QLoraRank      *int  `json:"q_lora_rank"`
	KVLoraRank     int   `json:"kv_lora_rank"`
	QKNopeHeadDim  int   `json:"qk_nope_head_dim"`
	QKRopeHeadDim  int   `json:"qk_rope_head_dim"`
	VHeadDim       int   `json:"v_head_dim"`
	RopeInterleave *bool `json:"rope_interleave"`
}

// LatentShape is what a layer's latent cache holds per token: the rotary key and the
// latent (kvstore.LayerLatent).
type LatentShape struct{ Rope, Rank int }

// NewLite binds a glm4_moe_lite checkpoint. Its attention is multi-head latent attention
// with kv_b_proj absorbed (compute.LatentAttentionContext): per token the cache keeps the
// normalised latent (kv_lora_rank) and the rotary key (qk_rope_head_dim) that all heads
// share; a head's no-rope query goes through kv_b_proj's key half into the latent space
// (self_attn.embed_q), and its attention output through the value half out of it
// (self_attn.unembed_out), as mlx-lm stores the two halves.
func NewLite(l *model.Loader) (model.Network, error) {
	if err := compute.Supports[compute.LatentAttentionContext](l.Backend, "multi-head latent attention"); err != nil {
		return nil, err
	}
	if err := compute.Supports[compute.LinearAttentionContext](l.Backend, "column slices (Cols)"); err != nil {
		return nil, err
	}
	moe, err := checkMoE(l)
	if err != nil {
		return nil, err
	}
	var lc LatentConfig
	raw, err := json.Marshal(l.Config.Raw)
	if err == nil {
		err = json.Unmarshal(raw, &lc)
	}
	if err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	if lc.KVLoraRank <= 0 || lc.QKNopeHeadDim <= 0 || lc.QKRopeHeadDim <= 0 || lc.VHeadDim <= 0 {
		return nil, fmt.Errorf("config.json: kv_lora_rank (%d), qk_nope_head_dim (%d), qk_rope_head_dim (%d) and v_head_dim (%d) must be positive",
			lc.KVLoraRank, lc.QKNopeHeadDim, lc.QKRopeHeadDim, lc.VHeadDim)
	}
	if l.Has("model.layers.0.self_attn.kv_b_proj.weight") {
		return nil, fmt.Errorf("the checkpoint stores kv_b_proj whole: convert it with `mlxg create`, which splits it into the per-head self_attn.embed_q and self_attn.unembed_out that latent attention reads (as mlx-lm does)")
	}
	cfg := l.Config
	rope, err := compute.NewRoPE(lc.QKRopeHeadDim, cfg.RopeTheta, cfg.RopeScaling, cfg.MaxPositions)
	if err != nil {
		return nil, err
	}
	rope.Interleaved = lc.RopeInterleave == nil || *lc.RopeInterleave
	qk := lc.QKNopeHeadDim + lc.QKRopeHeadDim
	scale := float32(math.Pow(float64(qk), -0.5))
	if s := cfg.RopeScaling; s.Type != "" && s.Type != "default" && s.MScaleAllDim != 0 && s.Factor > 1 {
		m := 0.1*s.MScaleAllDim*math.Log(s.Factor) + 1
		scale *= float32(m * m)
	}
	shape := &LatentShape{Rope: lc.QKRopeHeadDim, Rank: lc.KVLoraRank}
	n := newNetwork(l, moe, func(p string) llama.Mixer {
		a := &LatentAttention{Heads: cfg.NumHeads, Nope: lc.QKNopeHeadDim, Rope: lc.QKRopeHeadDim, Rank: lc.KVLoraRank,
			VDim: lc.VHeadDim, RoPE: rope, Scale: scale, Eps: cfg.RMSNormEps}
		h := cfg.HiddenSize
		if lc.QLoraRank != nil && *lc.QLoraRank > 0 {
			a.QA = l.Linear(p+"q_a_proj", *lc.QLoraRank, h)
			a.QANorm = l.Vector(p+"q_a_layernorm.weight", *lc.QLoraRank)
			a.QB = l.Linear(p+"q_b_proj", a.Heads*qk, *lc.QLoraRank)
		} else {
			a.Q = l.Linear(p+"q_proj", a.Heads*qk, h)
		}
		a.KVA = l.Linear(p+"kv_a_proj_with_mqa", a.Rank+a.Rope, h)
		a.KVANorm = l.Vector(p+"kv_a_layernorm.weight", a.Rank)
		a.EmbedQ = l.Linear(p+"embed_q", a.Heads*a.Rank, a.Nope)
		a.UnembedOut = l.Linear(p+"unembed_out", a.Heads*a.VDim, a.Rank)
		a.O = l.Linear(p+"o_proj", h, a.Heads*a.VDim)
		return a
	})
	n.Latent = shape
	return n, nil
}

// LatentAttention is multi-head latent attention over a latent cache.
type LatentAttention struct {
	QA, QB     compute.Weight // q_a_proj, q_b_proj (q_lora_rank set)
	QANorm     compute.Vector // q_a_layernorm
	Q          compute.Weight // q_proj (no q_lora_rank)
	KVA        compute.Weight // kv_a_proj_with_mqa: the latent, then the rotary key
	KVANorm    compute.Vector // kv_a_layernorm
	EmbedQ     compute.Weight // embed_q: per head, kv_b_proj's key half transposed (rank × nope)
	UnembedOut compute.Weight // unembed_out: per head, kv_b_proj's value half (v × rank)
	O          compute.Weight // o_proj
	Heads      int
	Nope, Rope int // qk_nope_head_dim, qk_rope_head_dim
	Rank, VDim int // kv_lora_rank, v_head_dim
	RoPE       *compute.RoPE
	Scale, Eps float32
}

// Forward implements llama.Mixer.
func (a *LatentAttention) Forward(c compute.Context, x compute.Tensor, b *model.Batch, layer int) compute.Tensor {
	cols, ok1 := compute.Ext[compute.LinearAttentionContext](c)
	lat, ok2 := compute.Ext[compute.LatentAttentionContext](c)
	if !ok1 || !ok2 {
		return compute.Unsupported(c, "multi-head latent attention")
	}
	T, _ := x.Dims()
	var q compute.Tensor
	if a.QA != nil {
		q = c.Linear(c.RMSNorm(c.Linear(x, a.QA), a.QANorm, a.Eps), a.QB)
	} else {
		q = c.Linear(x, a.Q)
	}
	qk := a.Nope + a.Rope
	qh := c.Reshape(q, T*a.Heads, qk)
	qNope := c.Reshape(cols.Cols(qh, 0, a.Nope), T, a.Heads*a.Nope)
	qRope := b.RoPE(c, c.Reshape(cols.Cols(qh, a.Nope, a.Rope), T, a.Heads*a.Rope), a.RoPE, a.Rope)
	kv := c.Linear(x, a.KVA)
	latent := c.RMSNorm(cols.Cols(kv, 0, a.Rank), a.KVANorm, a.Eps)
	kRope := b.RoPE(c, cols.Cols(kv, a.Rank, a.Rope), a.RoPE, a.Rope)
	qLatent := lat.MultiLinear(qNope, a.EmbedQ, a.Heads)
	o := b.LatentAttention(c, qRope, qLatent, kRope, latent, layer, a.Heads, a.Scale)
	return c.Linear(lat.MultiLinear(o, a.UnembedOut, a.Heads), a.O)
}

// NewCaches implements model.CacheMaker: a latent cache per layer for glm4_moe_lite (one
// KV head: the rotary key as keys, the latent as values), grouped-query caches for
// glm4_moe.
func (n *Network) NewCaches(fp32 bool) ([]kvstore.Layer, error) {
	caches := make([]kvstore.Layer, len(n.Layers))
	for i := range caches {
		var err error
		if n.Latent != nil {
			caches[i], err = kvstore.NewFull(1, n.Latent.Rope, n.Latent.Rank, fp32)
		} else {
			caches[i], err = kvstore.NewFull(n.KVHeads, n.HeadDim, n.HeadDim, fp32)
		}
		if err != nil {
			return nil, err
		}
	}
	return caches, nil
}
