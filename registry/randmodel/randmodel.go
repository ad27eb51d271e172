// Package randmodel writes deterministic random checkpoints in Hugging Face format
// (config.json, generation_config.json, *.safetensors), for tests and benchmarks.
//
// Supported architectures: llama (LlamaForCausalLM), qwen2 (Qwen2ForCausalLM, with
// q/k/v biases), qwen3 (Qwen3ForCausalLM, with per-head q/k RMSNorm), qwen3_moe
// (Qwen3MoeForCausalLM: per-expert tensors as Hugging Face stores them), gemma3_text
// (Gemma3ForCausalLM: sliding and global layers, four norms per layer) and qwen3_next
// (Qwen3NextForCausalLM: Gated DeltaNet and gated attention layers, experts and a
// shared expert; norms of the 1 + w kind drawn around 0), gemma4_text (Gemma4ForCausalLM:
// per-layer embeddings, KV-shared layers, experts beside the MLP; gemma4 and gemma4_unified
// write it in the multimodal layout, gemma4.go), gpt_oss, glm4_moe and glm4_moe_lite
// (DeepSeek-style routing; the lite one with multi-head latent attention), mistral
// (MistralForCausalLM, sliding_window on every layer when set), ministral3
// (Ministral3ForCausalLM: YaRN and llama_4_scaling_beta), mistral3
// (Mistral3ForConditionalGeneration: a mistral or ministral3 text_config, the language
// model under language_model.*, a token vision tower and projector beside it) and phi3
// (Phi3ForCausalLM: fused qkv_proj and gate_up_proj, partial rotary, longrope), any shape,
// any vocabulary size, float32, float16 or bfloat16 weights, tied or separate
// lm_head, optional RoPE scaling. A fixed seed gives byte-identical files whatever
// the number of CPUs: every tensor is filled in fixed-size chunks, each from its own
// generator seeded by (seed, tensor name, chunk index).
//
// Values keep activations at unit scale so that random models give well-spread
// logits: linear weights uniform with standard deviation 1/sqrt(fan_in), norm weights
// 1 ± 0.2, biases ± 0.1, and embeddings small (uniform in ±0.1, as trained ones
// are), so the layers' outputs dominate the residual stream and a tied-embedding
// model does not merely repeat its input token.
//
// A real tokenizer directory can be attached (tokenizer.json, tokenizer_config.json
// and friends are copied) so that the checkpoint runs end to end.
package randmodel

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/mlxg/mlxg/internal/files"
	"github.com/mlxg/mlxg/internal/half"
	"github.com/mlxg/mlxg/registry/safetensors"
)

// Config is the shape of a generated model.
type Config struct {
	Arch              string         `json:"arch"` // "llama", "qwen2" or "qwen3"
	VocabSize         int            `json:"vocab_size"`
	HiddenSize        int            `json:"hidden_size"`
	IntermediateSize  int            `json:"intermediate_size"`
	NumLayers         int            `json:"num_hidden_layers"`
	NumHeads          int            `json:"num_attention_heads"`
	NumKVHeads        int            `json:"num_key_value_heads"`
	HeadDim           int            `json:"head_dim,omitempty"` // 0: HiddenSize/NumHeads
	MaxPositions      int            `json:"max_position_embeddings"`
	RopeTheta         float64        `json:"rope_theta"`
	RopeScaling       map[string]any `json:"rope_scaling,omitempty"` // e.g. {"rope_type": "llama3", "factor": 8, ...}
	RMSNormEps        float64        `json:"rms_norm_eps"`
	TieWordEmbeddings bool           `json:"tie_word_embeddings"`
	AttentionBias     bool           `json:"attention_bias,omitempty"` // q/k/v biases; qwen2 always has them
	DType             string         `json:"dtype"`                    // "float32", "float16" or "bfloat16"
	BOSTokenID        *int           `json:"bos_token_id,omitempty"`
	EOSTokenIDs       []int          `json:"eos_token_ids,omitempty"` // written to generation_config.json

	// Mixture of experts (qwen3_moe, qwen3_next).
	NumExperts        int   `json:"num_experts,omitempty"`
	TopK              int   `json:"num_experts_per_tok,omitempty"`
	MoEIntermediate   int   `json:"moe_intermediate_size,omitempty"`
	NormTopK          bool  `json:"norm_topk_prob,omitempty"`
	DecoderSparseStep int   `json:"decoder_sparse_step,omitempty"` // 0 means 1
	MLPOnlyLayers     []int `json:"mlp_only_layers,omitempty"`
	SharedExpertInter int   `json:"shared_expert_intermediate_size,omitempty"` // qwen3_next
	// EmbeddingScale is the half-range of the uniform embeddings (0: 0.1). With the
	// default small embeddings the layers' outputs dominate the residual stream, which
	// then changes slowly from token to token: a random MoE's routing has the locality of
	// a trained one (about half of a token's picks repeat at the next token). Large
	// embeddings (a few units) make each token's routing its own: near-uniform routing.
	EmbeddingScale float64 `json:"-"`
	// Routing, when EmbeddingScale is 0, sets it for a routing locality (RoutingScales):
	// "local" (the default), "qwen" or "uniform".
	Routing string `json:"-"`
	// TailScale, when above 0, scales the output projections (o_proj, out_proj,
	// down_proj and the experts') of the layers from TailFrom on. Every tensor's values
	// come from its name and the seed only, so a model of TailFrom layers with the same
	// seed holds this one's embeddings, first layers, final norm and head exactly; with a
	// small TailScale the later layers only perturb the residual stream, and that short
	// model agrees with this one on most greedy tokens: a random draft model and its
	// target (the 0.5B shape drafted by its first 2 layers, for instance). 0: unscaled.
	TailScale float64 `json:"-"`
	TailFrom  int     `json:"-"`

	// Sliding-window and global layers (gemma3_text).
	SlidingWindow         int     `json:"sliding_window,omitempty"`
	SlidingWindowPattern  int     `json:"sliding_window_pattern,omitempty"` // every Nth layer global
	RopeLocalBaseFreq     float64 `json:"rope_local_base_freq,omitempty"`
	QueryPreAttnScalar    float64 `json:"query_pre_attn_scalar,omitempty"`
	FinalLogitSoftcapping float64 `json:"final_logit_softcapping,omitempty"`

	// Gated DeltaNet layers (qwen3_next).
	LinearKHeads          int     `json:"linear_num_key_heads,omitempty"`
	LinearVHeads          int     `json:"linear_num_value_heads,omitempty"`
	LinearKHeadDim        int     `json:"linear_key_head_dim,omitempty"`
	LinearVHeadDim        int     `json:"linear_value_head_dim,omitempty"`
	ConvKernel            int     `json:"linear_conv_kernel_dim,omitempty"`
	FullAttentionInterval int     `json:"full_attention_interval,omitempty"`
	PartialRotary         float64 `json:"partial_rotary_factor,omitempty"`

	// Gemma 4 (gemma4_text; gemma4 and gemma4_unified write the same text model in the
	// multimodal layout: text_config nested, weights under model.language_model.). The
	// full layers' RoPE is proportional over PartialRotary of the head, the sliding
	// layers' of base RopeLocalBaseFreq; every layer has experts when NumExperts is set.
	GlobalHeadDim  int  `json:"global_head_dim,omitempty"`
	GlobalKVHeads  int  `json:"num_global_key_value_heads,omitempty"`
	AttentionKEqV  bool `json:"attention_k_eq_v,omitempty"`
	KVSharedLayers int  `json:"num_kv_shared_layers,omitempty"`
	PerLayerInput  int  `json:"hidden_size_per_layer_input,omitempty"`
	DoubleWideMLP  bool `json:"use_double_wide_mlp,omitempty"`
	// DeepSeek-style experts (glm4_moe, glm4_moe_lite): the sigmoid router with its
	// correction bias, groups, scaling, shared experts and dense first layers; GLM's
	// multi-token prediction layers after the last (MTPLayers, skipped by loaders).
	SharedExperts  int     `json:"n_shared_experts,omitempty"`
	RoutedScaling  float64 `json:"routed_scaling_factor,omitempty"`
	NGroup         int     `json:"n_group,omitempty"`
	TopKGroup      int     `json:"topk_group,omitempty"`
	FirstDense     int     `json:"first_k_dense_replace,omitempty"`
	UseQKNorm      bool    `json:"use_qk_norm,omitempty"`
	MTPLayers      int     `json:"num_nextn_predict_layers,omitempty"`
	QLoraRank      int     `json:"q_lora_rank,omitempty"` // glm4_moe_lite; 0: q_proj
	KVLoraRank     int     `json:"kv_lora_rank,omitempty"`
	QKNopeHeadDim  int     `json:"qk_nope_head_dim,omitempty"`
	QKRopeHeadDim  int     `json:"qk_rope_head_dim,omitempty"`
	VHeadDim       int     `json:"v_head_dim,omitempty"`
	RopeInterleave bool    `json:"rope_interleave,omitempty"`
	// Mistral and Phi-3.
	TextArch         string  `json:"text_arch,omitempty"`                        // mistral3: its text_config's model_type, "mistral" or "ministral3"
	Llama4Beta       float64 `json:"llama_4_scaling_beta,omitempty"`             // ministral3
	OrigMaxPositions int     `json:"original_max_position_embeddings,omitempty"` // phi3 (longrope), ministral3 (yarn)
}

// RoutingScales are the embedding scales (Config.EmbeddingScale) that give a random MoE's
// router a routing locality: the share of a token's expert picks that it repeats at the
// next token, measured on Qwen3-30B-A3B's shape cut to 16 layers (128 experts, top 8,
// MLX 4-bit; 30 tokens sampled at temperature 1 after a 32-token prompt):
//
//	local    0.1   67% of the picks repeat (the default: the friendliest case)
//	qwen     0.9   47%, the statistic published for Qwen3-30B-A3B being about 45%
//	uniform  3     12%: near-uniform routing
//
// Larger embeddings weigh the token against what the layers add to the residual stream,
// which changes slowly from token to token.
var RoutingScales = map[string]float64{"local": 0.1, "qwen": 0.9, "uniform": 3}

// Options control how a checkpoint is written.
type Options struct {
	Seed uint64
	// TokenizerDir, when set, is copied into the checkpoint (tokenizer.json,
	// tokenizer_config.json, special_tokens_map.json, chat_template.jinja when present).
	TokenizerDir string
	// MaxShardBytes splits the weights into model-0000i-of-0000n.safetensors shards
	// plus model.safetensors.index.json when they exceed it; 0 means 2 GiB.
	MaxShardBytes int64
}

func intp(v int) *int { return &v }

// Qwen2_0_5B is the shape of Qwen2-0.5B / Qwen2.5-0.5B-Instruct, bfloat16, with the Qwen
// token ids (attach the qwen3 tokenizer, which shares them, to run it).
func Qwen2_0_5B() Config {
	return Config{
		Arch: "qwen2", VocabSize: 151936, HiddenSize: 896, IntermediateSize: 4864, NumLayers: 24,
		NumHeads: 14, NumKVHeads: 2, HeadDim: 64, MaxPositions: 32768, RopeTheta: 1e6, RMSNormEps: 1e-6,
		TieWordEmbeddings: true, AttentionBias: true, DType: "bfloat16",
		BOSTokenID: intp(151643), EOSTokenIDs: []int{151645, 151643},
	}
}

// Qwen2_1_5B is the shape of Qwen2-1.5B / Qwen2.5-1.5B-Instruct, bfloat16.
func Qwen2_1_5B() Config {
	c := Qwen2_0_5B()
	c.HiddenSize, c.IntermediateSize, c.NumLayers, c.NumHeads, c.HeadDim = 1536, 8960, 28, 12, 128
	return c
}

// Ministral3_3B is the text model of Ministral 3 3B (mistral3 around ministral3: YaRN,
// the query scale, tied embeddings), bfloat16.
func Ministral3_3B() Config {
	c := Config{Arch: "mistral3", TextArch: "ministral3", VocabSize: 131072, HiddenSize: 3072, IntermediateSize: 9216,
		NumLayers: 26, NumHeads: 32, NumKVHeads: 8, HeadDim: 128, MaxPositions: 262144, RopeTheta: 1e6,
		RMSNormEps: 1e-5, TieWordEmbeddings: true, DType: "bfloat16", OrigMaxPositions: 16384, Llama4Beta: 0.1,
		BOSTokenID: intp(1), EOSTokenIDs: []int{2}}
	c.RopeScaling = map[string]any{"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 16384,
		"beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
	return c
}

// MistralSmall3 is the text model of Mistral Small 3.1/3.2 and Magistral Small 24B
// (mistral3 around mistral, no window), bfloat16.
func MistralSmall3() Config {
	return Config{Arch: "mistral3", TextArch: "mistral", VocabSize: 131072, HiddenSize: 5120, IntermediateSize: 32768,
		NumLayers: 40, NumHeads: 32, NumKVHeads: 8, HeadDim: 128, MaxPositions: 131072, RopeTheta: 1e9,
		RMSNormEps: 1e-5, DType: "bfloat16", BOSTokenID: intp(1), EOSTokenIDs: []int{2}}
}

// Phi4Mini is the shape of Phi-4-mini-instruct (partial rotary 3/4, longrope over an
// original 4096 positions, tied embeddings), bfloat16.
func Phi4Mini() Config {
	c := Config{Arch: "phi3", VocabSize: 200064, HiddenSize: 3072, IntermediateSize: 8192, NumLayers: 32, NumHeads: 24,
		NumKVHeads: 8, HeadDim: 128, MaxPositions: 131072, RopeTheta: 10000, RMSNormEps: 1e-5, TieWordEmbeddings: true,
		DType: "bfloat16", PartialRotary: 0.75, OrigMaxPositions: 4096, BOSTokenID: intp(199999), EOSTokenIDs: []int{199999, 200020}}
	short, long := make([]float64, 48), make([]float64, 48)
	for i := range short {
		short[i], long[i] = 1+float64(i)/48, 1+float64(i)
	}
	c.RopeScaling = map[string]any{"type": "longrope", "short_factor": short, "long_factor": long}
	return c
}

// Phi4 is the shape of Phi-4 (14B; phi3 with the whole head rotated), bfloat16.
func Phi4() Config {
	return Config{Arch: "phi3", VocabSize: 100352, HiddenSize: 5120, IntermediateSize: 17920, NumLayers: 40, NumHeads: 40,
		NumKVHeads: 10, HeadDim: 128, MaxPositions: 16384, RopeTheta: 250000, RMSNormEps: 1e-5, DType: "bfloat16",
		PartialRotary: 1, BOSTokenID: intp(100257), EOSTokenIDs: []int{100265}}
}

// Tiny returns a small float32 model of arch for tests: 2 layers, hidden 128,
// grouped-query attention (4 heads, 2 KV heads).
func Tiny(arch string, vocab int) Config {
	c := Config{
		Arch: arch, VocabSize: vocab, HiddenSize: 128, IntermediateSize: 256, NumLayers: 2,
		NumHeads: 4, NumKVHeads: 2, HeadDim: 32, MaxPositions: 4096, RopeTheta: 10000, RMSNormEps: 1e-6,
		DType: "float32",
	}
	if arch == "qwen2" {
		c.AttentionBias = true
	}
	return c
}

var archNames = map[string]string{
	"llama":          "LlamaForCausalLM",
	"qwen2":          "Qwen2ForCausalLM",
	"qwen3":          "Qwen3ForCausalLM",
	"qwen3_moe":      "Qwen3MoeForCausalLM",
	"gemma3_text":    "Gemma3ForCausalLM",
	"gemma3":         "Gemma3ForConditionalGeneration",
	"qwen3_next":     "Qwen3NextForCausalLM",
	"gpt_oss":        "GptOssForCausalLM",
	"gemma4_text":    "Gemma4ForCausalLM",
	"gemma4":         "Gemma4ForConditionalGeneration",
	"gemma4_unified": "Gemma4ForConditionalGeneration",
	"glm4_moe":       "Glm4MoeForCausalLM",
	"glm4_moe_lite":  "Glm4MoeLiteForCausalLM",
	"mistral":        "MistralForCausalLM",
	"ministral3":     "Ministral3ForCausalLM",
	"mistral3":       "Mistral3ForConditionalGeneration",
	"phi3":           "Phi3ForCausalLM",
	"qwen2_5_vl":     "Qwen2_5_VLForConditionalGeneration",
	"qwen3_5":        "Qwen3_5ForConditionalGeneration",
	"qwen3_5_moe":    "Qwen3_5MoeForConditionalGeneration",
}

// qwenLanguageModels are the multimodal Qwen types by the architecture of their language
// model: Generate writes that model in the type's layout, beside a tiny vision tower.
var qwenLanguageModels = map[string]string{"qwen2_5_vl": "qwen2", "qwen3_5": "qwen3_next", "qwen3_5_moe": "qwen3_next"}

// gemma4 reports the Gemma 4 architectures.
func (c Config) gemma4() bool {
	return c.Arch == "gemma4_text" || c.Arch == "gemma4" || c.Arch == "gemma4_unified"
}

// TinyMoE returns a small float32 Qwen3-MoE: 2 layers, 8 experts of which 2 are
// picked per token, norm_topk_prob set.
func TinyMoE(vocab int) Config {
	c := Tiny("qwen3_moe", vocab)
	c.HeadDim, c.NumExperts, c.TopK, c.MoEIntermediate, c.NormTopK = 64, 8, 2, 64, true
	return c
}

// TinyGemma3 returns a small float32 Gemma 3 text model: 4 layers, every second one
// global, a sliding window of 8 positions.
func TinyGemma3(vocab int) Config {
	c := Tiny("gemma3_text", vocab)
	c.NumLayers, c.NumKVHeads, c.HeadDim, c.RopeTheta = 4, 1, 32, 1e6
	c.SlidingWindow, c.SlidingWindowPattern, c.RopeLocalBaseFreq, c.QueryPreAttnScalar = 8, 2, 1e4, 32
	c.TieWordEmbeddings = true
	return c
}

// TinyQwen3Next returns a small float32 Qwen3-Next: 4 layers (the fourth full
// attention), 4 value heads over 2 key heads, 8 experts plus a shared one.
func TinyQwen3Next(vocab int) Config {
	c := Tiny("qwen3_next", vocab)
	c.NumLayers, c.HeadDim, c.PartialRotary, c.RopeTheta = 4, 64, 0.25, 1e6
	c.NumExperts, c.TopK, c.MoEIntermediate, c.NormTopK, c.SharedExpertInter = 8, 2, 64, true, 96
	c.LinearKHeads, c.LinearVHeads, c.LinearKHeadDim, c.LinearVHeadDim, c.ConvKernel, c.FullAttentionInterval = 2, 4, 32, 32, 4, 4
	return c
}

// TinyGptOss returns a small float32 gpt-oss: 4 layers alternating a sliding window of
// 8 positions and full attention, attention sinks, 8 experts of which 2 are picked per
// token, YaRN RoPE as gpt-oss configures it.
func TinyGptOss(vocab int) Config {
	c := Tiny("gpt_oss", vocab)
	c.NumLayers, c.IntermediateSize, c.RopeTheta, c.RMSNormEps, c.MaxPositions = 4, 64, 150000, 1e-5, 131072
	c.NumExperts, c.TopK, c.SlidingWindow, c.AttentionBias = 8, 2, 8, true
	c.RopeScaling = map[string]any{"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
		"truncate": false, "original_max_position_embeddings": 4096}
	return c
}

// TinyGlm4Moe returns a small float32 GLM-4.5: 3 layers, the first dense, attention
// with biases, q/k norms and RoPE over half of each head, 8 experts in 2 groups of which
// 2 are picked from the best group, a shared expert, and a multi-token prediction layer.
func TinyGlm4Moe(vocab int) Config {
	c := Tiny("glm4_moe", vocab)
	c.NumLayers, c.PartialRotary, c.AttentionBias, c.UseQKNorm, c.RMSNormEps = 3, 0.5, true, true, 1e-5
	c.NumExperts, c.TopK, c.MoEIntermediate, c.NormTopK, c.SharedExperts = 8, 2, 64, true, 1
	c.RoutedScaling, c.NGroup, c.TopKGroup, c.FirstDense, c.MTPLayers = 2.5, 2, 1, 1, 1
	return c
}

// TinyGlm4MoeLite returns a small float32 GLM-4.7-Flash: 3 layers, the first dense,
// multi-head latent attention (q through a rank-64 bottleneck, no-rope heads of 64, a
// latent of 64, a rotary key of 32 in interleaved pairs), 8 experts of which 2 are picked, a shared expert, and
// a multi-token prediction layer.
func TinyGlm4MoeLite(vocab int) Config {
	c := Tiny("glm4_moe_lite", vocab)
	c.NumLayers, c.NumKVHeads, c.RMSNormEps = 3, 4, 1e-5
	c.QLoraRank, c.KVLoraRank, c.QKNopeHeadDim, c.QKRopeHeadDim, c.VHeadDim, c.RopeInterleave = 64, 64, 64, 32, 32, true
	c.HeadDim = c.QKRopeHeadDim
	c.NumExperts, c.TopK, c.MoEIntermediate, c.NormTopK, c.SharedExperts = 8, 2, 64, true, 1
	c.RoutedScaling, c.NGroup, c.TopKGroup, c.FirstDense, c.MTPLayers = 1.8, 1, 1, 1, 1
	return c
}

// glm reports whether the architecture is one of GLM's mixtures of experts.
func (c Config) glm() bool { return c.Arch == "glm4_moe" || c.Arch == "glm4_moe_lite" }

// TinyMistral returns a small float32 Mistral: 2 layers, both over a sliding window of
// 8 positions.
func TinyMistral(vocab int) Config {
	c := Tiny("mistral", vocab)
	c.SlidingWindow, c.RMSNormEps, c.RopeTheta = 8, 1e-5, 1e6
	return c
}

// TinyMinistral3 returns a small float32 Ministral 3 text model: YaRN as Ministral 3
// configures it (factor 16, mscale 1), and a query scale whose period (the original
// length) is 16 positions, so that tests cross a few of its steps.
func TinyMinistral3(vocab int) Config {
	c := Tiny("ministral3", vocab)
	c.RMSNormEps, c.RopeTheta, c.MaxPositions, c.OrigMaxPositions, c.Llama4Beta = 1e-5, 1e6, 4096, 16, 0.1
	c.RopeScaling = map[string]any{"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 16,
		"beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
	return c
}

// TinyMistral3 returns a small float32 Mistral 3 (Devstral Small 2, Ministral 3): a
// ministral3 text_config under the multimodal wrapper, tied embeddings as the 3B.
func TinyMistral3(vocab int) Config {
	c := TinyMinistral3(vocab)
	c.Arch, c.TextArch, c.TieWordEmbeddings = "mistral3", "ministral3", true
	return c
}

// TinyPhi3 returns a small float32 Phi-4-mini: 2 layers, 3/4 of each head rotated,
// longrope with an original length of 32 positions (the switch to the long factors
// inside a test's prompt), tied embeddings.
func TinyPhi3(vocab int) Config {
	c := Tiny("phi3", vocab)
	c.PartialRotary, c.MaxPositions, c.OrigMaxPositions, c.RMSNormEps, c.TieWordEmbeddings = 0.75, 1024, 32, 1e-5, true
	dims := c.headDim() * 3 / 4
	short, long := make([]float64, dims/2), make([]float64, dims/2)
	for i := range short {
		short[i], long[i] = 1+float64(i)*0.05, 1+float64(i)*0.9
	}
	c.RopeScaling = map[string]any{"type": "longrope", "short_factor": short, "long_factor": long}
	return c
}

// moe reports whether layer i has the expert block (transformers' rule).
func (c Config) moe(i int) bool {
	if c.glm() {
		return c.NumExperts > 0 && i >= c.FirstDense
	}
	if c.NumExperts == 0 || c.Arch == "gpt_oss" || c.gemma4() || slices.Contains(c.MLPOnlyLayers, i) {
		return false
	}
	step := max(c.DecoderSparseStep, 1)
	return (i+1)%step == 0
}

// linear reports whether layer i is a Gated DeltaNet layer (qwen3_next).
func (c Config) linear(i int) bool {
	return c.Arch == "qwen3_next" && (i+1)%c.FullAttentionInterval != 0
}

// sliding reports whether layer i is a sliding-window layer (gemma3_text; gpt_oss's
// even layers).
func (c Config) sliding(i int) bool {
	if c.Arch == "gpt_oss" {
		return i%2 == 0
	}
	if c.gemma4() {
		return c.SlidingWindowPattern > 1 && (i+1)%c.SlidingWindowPattern != 0 && i != c.NumLayers-1
	}
	return c.Arch == "gemma3_text" && c.SlidingWindowPattern > 1 && (i+1)%c.SlidingWindowPattern != 0
}

// hybrid reports the Gated DeltaNet architectures.
func (c Config) hybrid() bool {
	return c.Arch == "qwen3_next" || c.Arch == "qwen3_5" || c.Arch == "qwen3_5_moe"
}

// zeroCentredNorms: the architecture scales by 1 + w, so its norm weights are drawn
// around 0.
func (c Config) zeroCentredNorms() bool { return c.Arch == "gemma3_text" || c.Arch == "qwen3_next" }

var dtypes = map[string]safetensors.DType{
	"float32":  safetensors.F32,
	"float16":  safetensors.F16,
	"bfloat16": safetensors.BF16,
}

func (c Config) headDim() int {
	if c.HeadDim > 0 {
		return c.HeadDim
	}
	return c.HiddenSize / c.NumHeads
}

func (c Config) hasBias() bool { return c.Arch == "qwen2" || c.AttentionBias }

// Validate reports a shape that no architecture could load.
func (c Config) Validate() error {
	if _, ok := archNames[c.Arch]; !ok {
		return fmt.Errorf("randmodel: unknown arch %q: use llama, qwen2, qwen2_5_vl, qwen3, qwen3_moe, gemma3_text, gemma3, gemma4_text, gemma4, gemma4_unified, qwen3_next, qwen3_5, qwen3_5_moe, gpt_oss, glm4_moe, glm4_moe_lite, mistral, ministral3, mistral3 or phi3", c.Arch)
	}
	if _, ok := dtypes[c.DType]; !ok {
		return fmt.Errorf("randmodel: unknown dtype %q: use float32, float16 or bfloat16", c.DType)
	}
	if _, ok := RoutingScales[c.Routing]; c.Routing != "" && !ok {
		return fmt.Errorf("randmodel: unknown routing %q: use local, qwen or uniform", c.Routing)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumLayers}, {"num_attention_heads", c.NumHeads}, {"num_key_value_heads", c.NumKVHeads},
		{"max_position_embeddings", c.MaxPositions}} {
		if f.v <= 0 {
			return fmt.Errorf("randmodel: %s is %d: it must be positive", f.name, f.v)
		}
	}
	if c.NumHeads%c.NumKVHeads != 0 {
		return fmt.Errorf("randmodel: num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumHeads, c.NumKVHeads)
	}
	if c.HeadDim == 0 && c.HiddenSize%c.NumHeads != 0 {
		return fmt.Errorf("randmodel: hidden_size %d is not a multiple of num_attention_heads %d: set head_dim", c.HiddenSize, c.NumHeads)
	}
	if c.headDim()%2 != 0 {
		return fmt.Errorf("randmodel: head_dim %d must be even for RoPE", c.headDim())
	}
	if c.RMSNormEps <= 0 || c.RopeTheta <= 0 {
		return errors.New("randmodel: rms_norm_eps and rope_theta must be positive")
	}
	switch c.Arch {
	case "gpt_oss":
		if c.NumExperts <= 0 || c.TopK <= 0 || c.TopK > c.NumExperts || c.SlidingWindow <= 0 {
			return errors.New("randmodel: gpt_oss needs num_experts, num_experts_per_tok (at most num_experts) and sliding_window")
		}
	case "glm4_moe", "glm4_moe_lite":
		if c.NumExperts <= 0 || c.TopK <= 0 || c.TopK > c.NumExperts || c.MoEIntermediate <= 0 {
			return errors.New("randmodel: num_experts, num_experts_per_tok (at most num_experts) and moe_intermediate_size must be positive")
		}
		if g := max(c.NGroup, 1); c.NumExperts%g != 0 || max(c.TopKGroup, 1) > g {
			return errors.New("randmodel: n_group must divide num_experts, with topk_group at most n_group")
		}
		if c.Arch == "glm4_moe_lite" && (c.KVLoraRank <= 0 || c.QKNopeHeadDim <= 0 || c.QKRopeHeadDim <= 0 || c.VHeadDim <= 0) {
			return errors.New("randmodel: glm4_moe_lite needs kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim")
		}
	case "qwen3_5":
		if c.NumExperts > 0 {
			return errors.New("randmodel: qwen3_5 is dense: its experts are qwen3_5_moe's")
		}
	case "qwen3_moe", "qwen3_next", "qwen3_5_moe":
		if c.Arch == "qwen3_next" && c.NumExperts == 0 {
			break // dense (Generate writes qwen3_5 so)
		}
		if c.NumExperts <= 0 || c.TopK <= 0 || c.TopK > c.NumExperts || c.MoEIntermediate <= 0 {
			return errors.New("randmodel: num_experts, num_experts_per_tok (at most num_experts) and moe_intermediate_size must be positive")
		}
	case "gemma4_text", "gemma4", "gemma4_unified":
		if c.SlidingWindow <= 0 || c.SlidingWindowPattern <= 0 || c.RopeLocalBaseFreq <= 0 || c.PartialRotary <= 0 || c.PartialRotary > 1 {
			return errors.New("randmodel: gemma4 needs sliding_window, sliding_window_pattern, rope_local_base_freq and partial_rotary_factor in (0, 1]")
		}
		if c.KVSharedLayers < 0 || (c.KVSharedLayers > 0 && c.KVSharedLayers >= c.NumLayers-c.SlidingWindowPattern) {
			return errors.New("randmodel: gemma4's num_kv_shared_layers must leave a full and a sliding layer before them")
		}
		if c.NumExperts > 0 && (c.TopK <= 0 || c.TopK > c.NumExperts || c.MoEIntermediate <= 0) {
			return errors.New("randmodel: gemma4's experts need num_experts_per_tok (at most num_experts) and moe_intermediate_size")
		}
		if c.AttentionKEqV && (c.GlobalKVHeads <= 0 || c.NumHeads%c.GlobalKVHeads != 0) {
			return errors.New("randmodel: gemma4's attention_k_eq_v needs num_global_key_value_heads dividing the heads")
		}
	case "mistral3":
		if c.TextArch != "mistral" && c.TextArch != "ministral3" {
			return fmt.Errorf("randmodel: mistral3 needs text_arch mistral or ministral3, got %q", c.TextArch)
		}
		t := c
		t.Arch = c.TextArch
		return t.Validate()
	case "ministral3":
		if c.Llama4Beta <= 0 || c.OrigMaxPositions <= 0 {
			return errors.New("randmodel: ministral3 needs llama_4_scaling_beta and original_max_position_embeddings")
		}
	case "phi3":
		if c.PartialRotary <= 0 || c.PartialRotary > 1 {
			return errors.New("randmodel: phi3 needs partial_rotary_factor in (0, 1]")
		}
	case "gemma3_text", "gemma3":
		if c.SlidingWindow <= 0 || c.SlidingWindowPattern <= 0 || c.RopeLocalBaseFreq <= 0 || c.QueryPreAttnScalar <= 0 {
			return errors.New("randmodel: gemma3_text needs sliding_window, sliding_window_pattern, rope_local_base_freq and query_pre_attn_scalar")
		}
	}
	if c.hybrid() && (c.LinearKHeads <= 0 || c.LinearVHeads%c.LinearKHeads != 0 || c.LinearKHeadDim <= 0 ||
		c.LinearVHeadDim <= 0 || c.ConvKernel < 2 || c.FullAttentionInterval <= 0 || c.PartialRotary <= 0) {
		return errors.New("randmodel: qwen3_next, qwen3_5 and qwen3_5_moe need linear key heads dividing the value heads, head dims, a conv kernel of at least 2, full_attention_interval and partial_rotary_factor")
	}
	return nil
}

// HFConfig returns the config.json contents transformers and mlx-lm read.
func (c Config) HFConfig() map[string]any {
	if c.gemma4() {
		return c.gemma4Config()
	}
	m := map[string]any{
		"architectures":           []string{archNames[c.Arch]},
		"model_type":              c.Arch,
		"vocab_size":              c.VocabSize,
		"hidden_size":             c.HiddenSize,
		"intermediate_size":       c.IntermediateSize,
		"num_hidden_layers":       c.NumLayers,
		"num_attention_heads":     c.NumHeads,
		"num_key_value_heads":     c.NumKVHeads,
		"head_dim":                c.headDim(),
		"hidden_act":              "silu",
		"max_position_embeddings": c.MaxPositions,
		"rms_norm_eps":            c.RMSNormEps,
		"rope_theta":              c.RopeTheta,
		"tie_word_embeddings":     c.TieWordEmbeddings,
		"torch_dtype":             c.DType,
		"use_cache":               true,
		"attention_dropout":       0.0,
		"initializer_range":       0.02,
	}
	// transformers 5 reads rope_parameters; older readers and mlx-lm read rope_theta
	// and rope_scaling. Both say the same.
	rp := map[string]any{"rope_type": "default", "rope_theta": c.RopeTheta}
	if c.RopeScaling != nil {
		m["rope_scaling"] = c.RopeScaling
		for k, v := range c.RopeScaling {
			rp[k] = v
		}
		if t, ok := c.RopeScaling["type"]; ok && rp["rope_type"] == "default" {
			rp["rope_type"] = t
		}
		delete(rp, "type")
	}
	m["rope_parameters"] = rp
	switch c.Arch {
	case "llama":
		m["attention_bias"] = c.AttentionBias
		m["mlp_bias"] = false
		m["pretraining_tp"] = 1
	case "mistral", "ministral3":
		m["sliding_window"] = nil
		if c.SlidingWindow > 0 {
			m["sliding_window"] = c.SlidingWindow
		}
		if c.Arch == "ministral3" {
			// transformers 5 reads rope_parameters only; the yarn block, with Llama 4's
			// query scale, as Ministral 3 ships it.
			rp["llama_4_scaling_beta"] = c.Llama4Beta
			rp["original_max_position_embeddings"] = c.OrigMaxPositions
			delete(m, "rope_scaling")
			delete(m, "rope_theta")
		}
	case "phi3":
		m["sliding_window"] = nil
		if c.SlidingWindow > 0 {
			m["sliding_window"] = c.SlidingWindow
		}
		m["partial_rotary_factor"] = c.PartialRotary
		if c.OrigMaxPositions > 0 {
			m["original_max_position_embeddings"] = c.OrigMaxPositions
		}
		m["attention_bias"] = false
		m["resid_pdrop"], m["embd_pdrop"] = 0.0, 0.0
		m["pad_token_id"] = 0 // transformers' default (32000) is outside a small vocabulary
	case "mistral3":
		t := c
		t.Arch = c.TextArch
		text := t.HFConfig()
		delete(text, "architectures")
		delete(text, "torch_dtype")
		return map[string]any{
			"architectures": []string{archNames[c.Arch]},
			"model_type":    "mistral3",
			"text_config":   text,
			"vision_config": map[string]any{"model_type": "pixtral", "hidden_size": 32, "intermediate_size": 64,
				"num_hidden_layers": 1, "num_attention_heads": 2, "head_dim": 16, "num_channels": 3, "image_size": 64,
				"patch_size": 16, "rope_theta": 10000.0, "hidden_act": "silu"},
			"image_token_index":         10,
			"projector_hidden_act":      "gelu",
			"spatial_merge_size":        2,
			"multimodal_projector_bias": false,
			"vision_feature_layer":      -1,
			"torch_dtype":               c.DType,
			"tie_word_embeddings":       c.TieWordEmbeddings,
		}
	case "qwen2":
		m["use_sliding_window"] = false
		m["max_window_layers"] = c.NumLayers
	case "qwen3", "qwen3_moe":
		m["attention_bias"] = c.AttentionBias
		m["use_sliding_window"] = false
		m["max_window_layers"] = c.NumLayers
	case "gemma3_text":
		types := make([]string, c.NumLayers)
		for i := range types {
			types[i] = "full_attention"
			if c.sliding(i) {
				types[i] = "sliding_attention"
			}
		}
		m["layer_types"] = types
		m["sliding_window"] = c.SlidingWindow
		m["sliding_window_pattern"] = c.SlidingWindowPattern
		m["rope_local_base_freq"] = c.RopeLocalBaseFreq
		m["query_pre_attn_scalar"] = c.QueryPreAttnScalar
		m["hidden_activation"] = "gelu_pytorch_tanh"
		m["attn_logit_softcapping"] = nil
		m["final_logit_softcapping"] = nil
		if c.FinalLogitSoftcapping > 0 {
			m["final_logit_softcapping"] = c.FinalLogitSoftcapping
		}
		delete(m, "hidden_act")
		// transformers 5 reads one block per layer type; mlx-lm the flat keys above.
		full := map[string]any{"rope_type": "default", "rope_theta": c.RopeTheta}
		for k, v := range rp {
			full[k] = v
		}
		m["rope_parameters"] = map[string]any{"full_attention": full,
			"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": c.RopeLocalBaseFreq}}
	case "gpt_oss":
		types := make([]string, c.NumLayers)
		for i := range types {
			types[i] = "full_attention"
			if c.sliding(i) {
				types[i] = "sliding_attention"
			}
		}
		m["layer_types"] = types
		m["sliding_window"] = c.SlidingWindow
		m["attention_bias"] = true
		m["num_local_experts"] = c.NumExperts
		m["num_experts_per_tok"] = c.TopK
		m["swiglu_limit"] = 7.0
		m["router_aux_loss_coef"] = 0.9
		m["output_router_logits"] = false
	case "qwen3_next":
		types := make([]string, c.NumLayers)
		for i := range types {
			types[i] = "full_attention"
			if c.linear(i) {
				types[i] = "linear_attention"
			}
		}
		m["layer_types"] = types
		m["attention_bias"] = false
		m["partial_rotary_factor"] = c.PartialRotary
		rp["partial_rotary_factor"] = c.PartialRotary
		for k, v := range map[string]any{"linear_num_key_heads": c.LinearKHeads, "linear_num_value_heads": c.LinearVHeads,
			"linear_key_head_dim": c.LinearKHeadDim, "linear_value_head_dim": c.LinearVHeadDim,
			"linear_conv_kernel_dim": c.ConvKernel, "full_attention_interval": c.FullAttentionInterval,
			"shared_expert_intermediate_size": c.SharedExpertInter} {
			m[k] = v
		}
	}
	if c.glm() {
		m["n_routed_experts"] = c.NumExperts
		m["num_experts_per_tok"] = c.TopK
		m["moe_intermediate_size"] = c.MoEIntermediate
		m["norm_topk_prob"] = c.NormTopK
		m["n_shared_experts"] = c.SharedExperts
		m["routed_scaling_factor"] = c.RoutedScaling
		m["n_group"] = max(c.NGroup, 1)
		m["topk_group"] = max(c.TopKGroup, 1)
		m["first_k_dense_replace"] = c.FirstDense
		m["num_nextn_predict_layers"] = c.MTPLayers
		m["attention_bias"] = c.AttentionBias
		m["topk_method"] = "noaux_tc"
		m["scoring_func"] = "sigmoid"
		types := make([]string, c.NumLayers)
		for i := range types {
			types[i] = "dense"
			if c.moe(i) {
				types[i] = "sparse"
			}
		}
		if c.Arch == "glm4_moe" {
			m["use_qk_norm"] = c.UseQKNorm
			m["partial_rotary_factor"] = c.PartialRotary
			rp["partial_rotary_factor"] = c.PartialRotary
		} else {
			m["mlp_layer_types"] = types
			if c.QLoraRank > 0 {
				m["q_lora_rank"] = c.QLoraRank
			} else {
				m["q_lora_rank"] = nil
			}
			m["kv_lora_rank"] = c.KVLoraRank
			m["qk_nope_head_dim"] = c.QKNopeHeadDim
			m["qk_rope_head_dim"] = c.QKRopeHeadDim
			m["v_head_dim"] = c.VHeadDim
			m["rope_interleave"] = c.RopeInterleave
			m["head_dim"] = c.QKRopeHeadDim // transformers maps head_dim to qk_rope_head_dim
		}
	}
	if c.NumExperts > 0 && c.Arch != "gpt_oss" && !c.glm() {
		m["num_experts"] = c.NumExperts
		m["num_experts_per_tok"] = c.TopK
		m["moe_intermediate_size"] = c.MoEIntermediate
		m["norm_topk_prob"] = c.NormTopK
		m["decoder_sparse_step"] = max(c.DecoderSparseStep, 1)
		m["mlp_only_layers"] = append([]int{}, c.MLPOnlyLayers...)
		m["output_router_logits"] = false
		m["router_aux_loss_coef"] = 0.001
	}
	if c.BOSTokenID != nil {
		m["bos_token_id"] = *c.BOSTokenID
	}
	if len(c.EOSTokenIDs) > 0 {
		m["eos_token_id"] = c.EOSTokenIDs[0]
	}
	return m
}

// TensorSpec is one weight of the model, in Hugging Face naming.
type TensorSpec struct {
	Name   string
	Shape  []int
	center float32 // values are center + scale*u, u uniform in [-1, 1)
	scale  float32
}

// Tensors lists the model's weights in the order they are written.
func (c Config) Tensors() []TensorSpec {
	if c.gemma4() {
		return c.gemma4Tensors()
	}
	if lm, ok := qwenLanguageModels[c.Arch]; ok { // as the language model names them, without the tower
		c.Arch = lm
		return c.Tensors()
	}
	h, hd := c.HiddenSize, c.headDim()
	q, kv := c.NumHeads*hd, c.NumKVHeads*hd
	lin := func(name string, out, in int) TensorSpec {
		return TensorSpec{name, []int{out, in}, 0, float32(math.Sqrt(3 / float64(in)))}
	}
	norm := func(name string, n int) TensorSpec { return TensorSpec{name, []int{n}, 1, 0.2} }
	bias := func(name string, n int) TensorSpec { return TensorSpec{name, []int{n}, 0, 0.1} }

	if c.zeroCentredNorms() {
		norm = func(name string, n int) TensorSpec { return TensorSpec{name, []int{n}, 0, 0.2} }
	}
	mlp := func(p string, inter int) []TensorSpec {
		return []TensorSpec{lin(p+"gate_proj.weight", inter, h), lin(p+"up_proj.weight", inter, h), lin(p+"down_proj.weight", h, inter)}
	}

	embed := float32(0.1)
	if r, ok := RoutingScales[c.Routing]; ok {
		embed = float32(r)
	}
	if c.EmbeddingScale > 0 {
		embed = float32(c.EmbeddingScale)
	}
	if c.Arch == "mistral3" {
		return c.mistral3Tensors()
	}
	ts := []TensorSpec{{"model.embed_tokens.weight", []int{c.VocabSize, h}, 0, embed}}
	for i := range c.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		first := len(ts)
		ts = append(ts, norm(p+"input_layernorm.weight", h))
		switch {
		case c.linear(i):
			kd, vd := c.LinearKHeads*c.LinearKHeadDim, c.LinearVHeads*c.LinearVHeadDim
			conv := 2*kd + vd
			ts = append(ts,
				lin(p+"linear_attn.in_proj_qkvz.weight", 2*kd+2*vd, h),
				lin(p+"linear_attn.in_proj_ba.weight", 2*c.LinearVHeads, h),
				TensorSpec{p + "linear_attn.conv1d.weight", []int{conv, 1, c.ConvKernel}, 0, float32(math.Sqrt(3 / float64(c.ConvKernel)))},
				TensorSpec{p + "linear_attn.A_log", []int{c.LinearVHeads}, 0, 1},
				TensorSpec{p + "linear_attn.dt_bias", []int{c.LinearVHeads}, 1, 0.5},
				TensorSpec{p + "linear_attn.norm.weight", []int{c.LinearVHeadDim}, 1, 0.2}, // the gated norm scales by w
				lin(p+"linear_attn.out_proj.weight", h, vd))
		case c.Arch == "glm4_moe_lite":
			qk := c.QKNopeHeadDim + c.QKRopeHeadDim
			if c.QLoraRank > 0 {
				ts = append(ts, lin(p+"self_attn.q_a_proj.weight", c.QLoraRank, h), norm(p+"self_attn.q_a_layernorm.weight", c.QLoraRank),
					lin(p+"self_attn.q_b_proj.weight", c.NumHeads*qk, c.QLoraRank))
			} else {
				ts = append(ts, lin(p+"self_attn.q_proj.weight", c.NumHeads*qk, h))
			}
			ts = append(ts, lin(p+"self_attn.kv_a_proj_with_mqa.weight", c.KVLoraRank+c.QKRopeHeadDim, h),
				norm(p+"self_attn.kv_a_layernorm.weight", c.KVLoraRank),
				lin(p+"self_attn.kv_b_proj.weight", c.NumHeads*(c.QKNopeHeadDim+c.VHeadDim), c.KVLoraRank),
				lin(p+"self_attn.o_proj.weight", h, c.NumHeads*c.VHeadDim))
		case c.Arch == "phi3":
			ts = append(ts, lin(p+"self_attn.qkv_proj.weight", q+2*kv, h), lin(p+"self_attn.o_proj.weight", h, q))
		default:
			qo := q
			if c.Arch == "qwen3_next" {
				qo = 2 * q // the query and its gate
			}
			ts = append(ts, lin(p+"self_attn.q_proj.weight", qo, h))
			if c.hasBias() {
				ts = append(ts, bias(p+"self_attn.q_proj.bias", q))
			}
			ts = append(ts, lin(p+"self_attn.k_proj.weight", kv, h))
			if c.hasBias() {
				ts = append(ts, bias(p+"self_attn.k_proj.bias", kv))
			}
			ts = append(ts, lin(p+"self_attn.v_proj.weight", kv, h))
			if c.hasBias() {
				ts = append(ts, bias(p+"self_attn.v_proj.bias", kv))
			}
			ts = append(ts, lin(p+"self_attn.o_proj.weight", h, q))
			if (c.Arch == "llama" && c.AttentionBias) || c.Arch == "gpt_oss" {
				ts = append(ts, bias(p+"self_attn.o_proj.bias", h))
			}
			if c.Arch == "gpt_oss" {
				ts = append(ts, TensorSpec{p + "self_attn.sinks", []int{c.NumHeads}, 0, 1})
			}
			if c.Arch == "qwen3" || c.Arch == "qwen3_moe" || c.Arch == "qwen3_next" || c.Arch == "gemma3_text" || (c.Arch == "glm4_moe" && c.UseQKNorm) {
				ts = append(ts, norm(p+"self_attn.q_norm.weight", hd), norm(p+"self_attn.k_norm.weight", hd))
			}
		}
		ts = append(ts, norm(p+"post_attention_layernorm.weight", h))
		if c.Arch == "gemma3_text" {
			ts = append(ts, norm(p+"pre_feedforward_layernorm.weight", h))
		}
		if c.Arch == "gpt_oss" { // fused experts, [experts, in, out] as transformers keeps them
			E, I := c.NumExperts, c.IntermediateSize
			ts = append(ts, lin(p+"mlp.router.weight", E, h), bias(p+"mlp.router.bias", E),
				TensorSpec{p + "mlp.experts.gate_up_proj", []int{E, h, 2 * I}, 0, float32(math.Sqrt(3 / float64(h)))},
				TensorSpec{p + "mlp.experts.gate_up_proj_bias", []int{E, 2 * I}, 0, 0.1},
				TensorSpec{p + "mlp.experts.down_proj", []int{E, I, h}, 0, float32(math.Sqrt(3 / float64(I)))},
				TensorSpec{p + "mlp.experts.down_proj_bias", []int{E, h}, 0, 0.1})
		} else if c.moe(i) && c.glm() {
			ts = append(ts, lin(p+"mlp.gate.weight", c.NumExperts, h), bias(p+"mlp.gate.e_score_correction_bias", c.NumExperts))
			for e := range c.NumExperts {
				ts = append(ts, mlp(fmt.Sprintf("%smlp.experts.%d.", p, e), c.MoEIntermediate)...)
			}
			if c.SharedExperts > 0 {
				ts = append(ts, mlp(p+"mlp.shared_experts.", c.SharedExperts*c.MoEIntermediate)...)
			}
		} else if c.Arch == "phi3" {
			ts = append(ts, lin(p+"mlp.gate_up_proj.weight", 2*c.IntermediateSize, h), lin(p+"mlp.down_proj.weight", h, c.IntermediateSize))
		} else if c.moe(i) {
			ts = append(ts, lin(p+"mlp.gate.weight", c.NumExperts, h))
			for e := range c.NumExperts {
				ts = append(ts, mlp(fmt.Sprintf("%smlp.experts.%d.", p, e), c.MoEIntermediate)...)
			}
			if c.SharedExpertInter > 0 {
				ts = append(ts, mlp(p+"mlp.shared_expert.", c.SharedExpertInter)...)
				ts = append(ts, lin(p+"mlp.shared_expert_gate.weight", 1, h))
			}
		} else {
			ts = append(ts, mlp(p+"mlp.", c.IntermediateSize)...)
		}
		if c.Arch == "gemma3_text" {
			ts = append(ts, norm(p+"post_feedforward_layernorm.weight", h))
		}
		if c.TailScale > 0 && i >= c.TailFrom {
			for j := first; j < len(ts); j++ {
				if n := ts[j].Name; strings.HasSuffix(n, "o_proj.weight") || strings.HasSuffix(n, "out_proj.weight") || strings.HasSuffix(n, "down_proj.weight") {
					ts[j].scale *= float32(c.TailScale)
				}
			}
		}
	}
	for i := c.NumLayers; i < c.NumLayers+c.MTPLayers; i++ {
		// GLM's multi-token prediction layer: what a checkpoint carries, never loaded.
		p := fmt.Sprintf("model.layers.%d.", i)
		ts = append(ts, norm(p+"enorm.weight", h), norm(p+"hnorm.weight", h), lin(p+"eh_proj.weight", h, 2*h),
			norm(p+"shared_head.norm.weight", h))
	}
	ts = append(ts, norm("model.norm.weight", h))
	if !c.TieWordEmbeddings {
		ts = append(ts, lin("lm_head.weight", c.VocabSize, h))
	}
	return ts
}

// mistral3Tensors is the text model's tensors under language_model.* (mlx-lm's layout,
// and transformers 4's), then a token vision tower and projector that a text-only
// loader leaves unbound.
func (c Config) mistral3Tensors() []TensorSpec {
	t := c
	t.Arch = c.TextArch
	var ts []TensorSpec
	for _, s := range t.Tensors() {
		s.Name = "language_model." + s.Name
		ts = append(ts, s)
	}
	return append(ts,
		TensorSpec{"vision_tower.patch_conv.weight", []int{32, 3, 16, 16}, 0, 0.05},
		TensorSpec{"vision_tower.ln_pre.weight", []int{32}, 1, 0.2},
		TensorSpec{"multi_modal_projector.norm.weight", []int{32}, 1, 0.2},
		TensorSpec{"multi_modal_projector.linear_1.weight", []int{c.HiddenSize, 32 * 4}, 0, 0.1},
		TensorSpec{"multi_modal_projector.linear_2.weight", []int{c.HiddenSize, c.HiddenSize}, 0, 0.1})
}

// NumParams counts the model's parameters.
func (c Config) NumParams() int64 {
	var n int64
	for _, t := range c.Tensors() {
		e := int64(1)
		for _, d := range t.Shape {
			e *= int64(d)
		}
		n += e
	}
	return n
}

// Generate writes the checkpoint of cfg into dir (created if needed). The multimodal
// types come with a tiny vision tower, in Hugging Face's layout as `mlxg create` reads
// it: gemma3 (TinyGemma3Vision's), qwen2_5_vl (a qwen2 model with TinyQwen25Vision's, as
// Qwen ships it: AddQwen25VisionHF), qwen3_5 and qwen3_5_moe (a qwen3_next model without
// or with experts, with TinyQwenVision's: GenerateQwen35).
func Generate(dir string, cfg Config, opts Options) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	switch cfg.Arch {
	case "gemma3":
		return generateGemma3(dir, cfg, opts)
	case "qwen2_5_vl":
		cfg.Arch = qwenLanguageModels["qwen2_5_vl"]
		if err := Generate(dir, cfg, opts); err != nil {
			return err
		}
		return AddQwen25VisionHF(dir, TinyQwen25Vision(), opts.Seed)
	case "qwen3_5", "qwen3_5_moe":
		v := TinyQwenVision()
		cfg.Arch = qwenLanguageModels[cfg.Arch]
		return GenerateQwen35(dir, cfg, &v, opts)
	}
	if opts.TokenizerDir != "" {
		if err := checkTokenizer(opts.TokenizerDir, cfg.VocabSize); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), cfg.HFConfig()); err != nil {
		return err
	}
	gen := map[string]any{"do_sample": false}
	if cfg.BOSTokenID != nil {
		gen["bos_token_id"] = *cfg.BOSTokenID
	}
	if len(cfg.EOSTokenIDs) > 0 {
		gen["eos_token_id"] = cfg.EOSTokenIDs
	}
	if err := writeJSON(filepath.Join(dir, "generation_config.json"), gen); err != nil {
		return err
	}
	if err := writeWeights(dir, cfg, opts); err != nil {
		return err
	}
	if opts.TokenizerDir != "" {
		for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"} {
			err := files.Copy(filepath.Join(opts.TokenizerDir, name), filepath.Join(dir, name))
			if errors.Is(err, os.ErrNotExist) && name != "tokenizer.json" {
				continue
			}
			if err != nil {
				return fmt.Errorf("randmodel: copying the tokenizer: %w", err)
			}
		}
	}
	return nil
}

// writeWeights fills and writes the tensors shard by shard, holding one shard in
// memory at a time.
func writeWeights(dir string, cfg Config, opts Options) error {
	limit := opts.MaxShardBytes
	if limit <= 0 {
		limit = 2 << 30
	}
	dt := dtypes[cfg.DType]
	var shards [][]TensorSpec
	var cur []TensorSpec
	var size, total int64
	for _, t := range cfg.Tensors() {
		n := int64(dt.Size())
		for _, d := range t.Shape {
			n *= int64(d)
		}
		if len(cur) > 0 && size+n > limit {
			shards = append(shards, cur)
			cur, size = nil, 0
		}
		cur = append(cur, t)
		size += n
		total += n
	}
	shards = append(shards, cur)

	weightMap := map[string]string{}
	for i, specs := range shards {
		name := "model.safetensors"
		if len(shards) > 1 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		}
		tensors := make([]safetensors.Tensor, len(specs))
		for j, s := range specs {
			tensors[j] = safetensors.Tensor{
				TensorInfo: safetensors.TensorInfo{Name: s.Name, DType: dt, Shape: s.Shape},
				Data:       fill(s, dt, opts.Seed),
			}
			weightMap[s.Name] = name
		}
		if err := safetensors.Write(filepath.Join(dir, name), tensors, map[string]string{"format": "pt"}); err != nil {
			return err
		}
	}
	if len(shards) > 1 {
		index := map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}
		return writeJSON(filepath.Join(dir, safetensors.IndexFile), index)
	}
	return nil
}

const chunk = 1 << 16 // elements per independently seeded run

// fill returns the tensor's bytes in dtype dt.
func fill(s TensorSpec, dt safetensors.DType, seed uint64) []byte {
	n := 1
	for _, d := range s.Shape {
		n *= d
	}
	h := fnv.New64a()
	io.WriteString(h, s.Name)
	nameHash := h.Sum64()
	out := make([]byte, n*dt.Size())
	chunks := (n + chunk - 1) / chunk
	var wg sync.WaitGroup
	next := make(chan int, chunks)
	for c := range chunks {
		next <- c
	}
	close(next)
	for range min(runtime.GOMAXPROCS(0), chunks) {
		wg.Go(func() {
			vals := make([]float32, chunk)
			for c := range next {
				lo, hi := c*chunk, min(n, (c+1)*chunk)
				v := vals[:hi-lo]
				r := splitmix{mix(seed ^ mix(nameHash^mix(uint64(c)+0x632BE59BD9B4E019)))}
				for i := range v {
					// 24 random bits -> uniform in [-1, 1), exact in float32.
					u := float32(int32(r.next()>>40)-(1<<23)) / (1 << 23)
					v[i] = s.center + s.scale*u
				}
				encode(out[lo*dt.Size():hi*dt.Size()], v, dt)
			}
		})
	}
	wg.Wait()
	return out
}

func encode(dst []byte, v []float32, dt safetensors.DType) {
	switch dt {
	case safetensors.F32:
		for i, f := range v {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(f))
		}
	case safetensors.F16:
		half.EncodeF16(dst, v)
	case safetensors.BF16:
		half.EncodeBF16(dst, v)
	}
}

// splitmix is SplitMix64: tiny, fast and good enough for weights.
type splitmix struct{ s uint64 }

func (r *splitmix) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	return mix(r.s)
}

func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// checkTokenizer refuses a tokenizer whose ids do not fit the vocabulary.
func checkTokenizer(dir string, vocab int) error {
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return fmt.Errorf("randmodel: tokenizer dir: %w", err)
	}
	var tj struct {
		Model struct {
			Vocab json.RawMessage `json:"vocab"`
		} `json:"model"`
		AddedTokens []struct {
			ID int `json:"id"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(raw, &tj); err != nil {
		return fmt.Errorf("randmodel: %s: %w", filepath.Join(dir, "tokenizer.json"), err)
	}
	maxID := -1
	var byName map[string]int
	if json.Unmarshal(tj.Model.Vocab, &byName) == nil {
		for _, id := range byName {
			maxID = max(maxID, id)
		}
	} else {
		var list []json.RawMessage // unigram: [[piece, score], ...]
		if json.Unmarshal(tj.Model.Vocab, &list) == nil {
			maxID = len(list) - 1
		}
	}
	for _, t := range tj.AddedTokens {
		maxID = max(maxID, t.ID)
	}
	if maxID >= vocab {
		return fmt.Errorf("randmodel: the tokenizer in %s uses ids up to %d but vocab_size is %d: raise vocab_size to at least %d", dir, maxID, vocab, maxID+1)
	}
	return nil
}

// readJSONMap reads the JSON object in path (a config.json to add to) as a map.
func readJSONMap(path string) (map[string]any, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Digest is the sha256 of a checkpoint's tensors — for each, in name order, its name,
// dtype, shape and bytes — independent of how they are laid out in files (sharding,
// header order, metadata). Reference fixtures record it to tell that a checkpoint
// rebuilt later holds the same weights.
func Digest(dir string) (string, error) {
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return "", err
	}
	defer ck.Close()
	h := sha256.New()
	for _, name := range ck.Names() {
		t, _ := ck.Tensor(name)
		shape, _ := json.Marshal(append([]int{}, t.Shape...)) // a scalar's shape is [], not null
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00", name, t.DType, shape)
		h.Write(t.Data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
