package glm4moe

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/safetensors"
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
// (self_attn.unembed_out), as mlx-lm stores the two halves. A checkpoint that stores
// kv_b_proj whole (mlx-lm's first glm4_moe_lite conversions) has it split at load.
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
		if l.Has(p + "kv_b_proj.weight") {
			a.EmbedQ, a.UnembedOut = splitKVB(l, p, a)
		} else {
			a.EmbedQ = l.Linear(p+"embed_q", a.Heads*a.Rank, a.Nope)
			a.UnembedOut = l.Linear(p+"unembed_out", a.Heads*a.VDim, a.Rank)
		}
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

// splitKVB binds embed_q and unembed_out from a checkpoint that stores the layer's
// kv_b_proj ([heads·(nope+v), rank]) whole, as mlx-lm's sanitize does on loading one:
// the matrix is dequantized, each head's key half transposed into embed_q's
// [heads, rank, nope] and its value half taken as unembed_out's [heads, v, rank], and
// both quantized again in kv_b_proj's bits and group (kept in float32 when kv_b_proj is
// float, or when the group does not divide a half's width).
func splitKVB(l *model.Loader, p string, a *LatentAttention) (embedQ, unembed compute.Weight) {
	name := p + "kv_b_proj"
	H, nope, vd, rank := a.Heads, a.Nope, a.VDim, a.Rank
	rows := H * (nope + vd)
	q := l.Config.Quantization.For(name, l.Has)
	t, _ := l.Tensor(name + ".weight")
	var w []float32
	var err error
	switch {
	case q.Mode == quant.Affine:
		sc, ok1 := l.Tensor(name + ".scales")
		bi, ok2 := l.Tensor(name + ".biases")
		if !ok1 || !ok2 || t.DType != safetensors.U32 || len(t.Data) != rows*quant.Words(rank, q.Bits)*4 {
			err = fmt.Errorf("%s: not %d×%d affine codes with scales and biases", name, rows, rank)
			break
		}
		packed := make([]uint32, len(t.Data)/4)
		for i := range packed {
			packed[i] = binary.LittleEndian.Uint32(t.Data[4*i:])
		}
		var scales, biases []float32
		if scales, err = sc.Float32s(); err == nil {
			if biases, err = bi.Float32s(); err == nil {
				w, err = quant.Dequantize(packed, scales, biases, rows, rank, q.Bits, q.GroupSize)
			}
		}
	case q.Quantized():
		err = fmt.Errorf("%s in %s mode: only affine or float kv_b_proj is split at load", name, q.Mode)
	default:
		if w, err = t.Float32s(); err == nil && len(w) != rows*rank {
			err = fmt.Errorf("%s has %d values, the config implies %d×%d", name, len(w), rows, rank)
		}
	}
	if err != nil {
		l.Fail(err)
		return nil, nil
	}
	kHalf := make([]float32, H*rank*nope)
	vHalf := make([]float32, H*vd*rank)
	for h := 0; h < H; h++ {
		base := h * (nope + vd) * rank
		for d := 0; d < nope; d++ {
			for x := 0; x < rank; x++ {
				kHalf[(h*rank+x)*nope+d] = w[base+d*rank+x]
			}
		}
		copy(vHalf[h*vd*rank:(h+1)*vd*rank], w[base+nope*rank:base+(nope+vd)*rank])
	}
	bind := func(suffix string, vals []float32, out, in int) compute.Weight {
		src := derived{}
		wq := compute.Quant{}
		prefix := p + suffix
		if q.Mode == quant.Affine && in%q.GroupSize == 0 {
			packed, scales, biases, err := quant.Quantize(vals, H*out, in, q.Bits, q.GroupSize)
			if err != nil {
				l.Fail(fmt.Errorf("%s: %w", prefix, err))
				return nil
			}
			words := make([]byte, 4*len(packed))
			for i, v := range packed {
				binary.LittleEndian.PutUint32(words[4*i:], v)
			}
			src.add(prefix+".weight", safetensors.U32, []int{H, out, quant.Words(in, q.Bits)}, words)
			src.add(prefix+".scales", safetensors.F32, []int{H, out, in / q.GroupSize}, f32Bytes(scales))
			src.add(prefix+".biases", safetensors.F32, []int{H, out, in / q.GroupSize}, f32Bytes(biases))
			wq = q
		} else {
			src.add(prefix+".weight", safetensors.F32, []int{H, out, in}, f32Bytes(vals))
		}
		b, err := l.Backend.Weight(src, prefix, wq)
		if err != nil {
			l.Fail(err)
			return nil
		}
		return b
	}
	return bind("embed_q", kHalf, rank, nope), bind("unembed_out", vHalf, vd, rank)
}

// derived is a compute.Source of tensors made at load.
type derived map[string]*safetensors.Tensor

func (d derived) Tensor(name string) (*safetensors.Tensor, bool) { t, ok := d[name]; return t, ok }

func (d derived) add(name string, dt safetensors.DType, shape []int, data []byte) {
	d[name] = &safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: dt, Shape: shape, End: int64(len(data))}, Data: data}
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}
