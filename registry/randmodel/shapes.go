package randmodel

// Real shapes of the families mlxg runs, for benchmarks that cut them to a few layers
// (Cut). Each value was read from the model's public config.json (as quoted in public
// sources named beside each preset); the vocabulary, widths, heads and expert counts are
// the checkpoint's, so a cut model's per-layer cost and its embedding and head are real.

// Qwen3_8B is Qwen3-8B (Qwen/Qwen3-8B config.json: hidden 4096, MLP 12288, 36 layers,
// 32 query and 8 KV heads of 128, untied head; scripts/bench's dense stream case uses
// the same widths), bfloat16.
func Qwen3_8B() Config {
	return Config{Arch: "qwen3", VocabSize: 151936, HiddenSize: 4096, IntermediateSize: 12288, NumLayers: 36,
		NumHeads: 32, NumKVHeads: 8, HeadDim: 128, MaxPositions: 40960, RopeTheta: 1e6, RMSNormEps: 1e-6,
		DType: "bfloat16", BOSTokenID: intp(151643), EOSTokenIDs: []int{151645}}
}

// Qwen3_30B_A3B is Qwen3-30B-A3B (Qwen/Qwen3-30B-A3B config.json, as slime's
// scripts/models/qwen3-30B-A3B.sh restates it (read in the zyzshishui/slime mirror):
// hidden 2048, 48 layers, 32 query and 4 KV heads of 128, 128 experts of 768 of which 8
// are picked; the shape scripts/bench stream also uses), bfloat16.
func Qwen3_30B_A3B() Config {
	return Config{Arch: "qwen3_moe", VocabSize: 151936, HiddenSize: 2048, IntermediateSize: 6144, NumLayers: 48,
		NumHeads: 32, NumKVHeads: 4, HeadDim: 128, MaxPositions: 40960, RopeTheta: 1e6, RMSNormEps: 1e-6,
		DType: "bfloat16", NumExperts: 128, TopK: 8, MoEIntermediate: 768, NormTopK: true,
		BOSTokenID: intp(151643), EOSTokenIDs: []int{151645}}
}

// Qwen3Next80B is Qwen3-Next-80B-A3B (Qwen/Qwen3-Next-80B-A3B-Instruct config.json, as
// slime's scripts/models/qwen3-next-80B-A3B.sh restates it (zyzshishui/slime):
// hidden 2048, 48 layers of which every 4th is gated attention (16 query, 2 KV heads of
// 256, a quarter rotated), Gated DeltaNet with 16 key and 32 value heads of 128, 512
// experts of 512 of which 10 are picked, a shared expert of 512; the DeltaNet widths as
// a public parameter-count test quotes the config, 79.67B parameters), bfloat16.
func Qwen3Next80B() Config {
	return Config{Arch: "qwen3_next", VocabSize: 151936, HiddenSize: 2048, IntermediateSize: 5120, NumLayers: 48,
		NumHeads: 16, NumKVHeads: 2, HeadDim: 256, MaxPositions: 262144, RopeTheta: 1e7, RMSNormEps: 1e-6,
		DType: "bfloat16", NumExperts: 512, TopK: 10, MoEIntermediate: 512, NormTopK: true, SharedExpertInter: 512,
		LinearKHeads: 16, LinearVHeads: 32, LinearKHeadDim: 128, LinearVHeadDim: 128, ConvKernel: 4,
		FullAttentionInterval: 4, PartialRotary: 0.25, BOSTokenID: intp(151643), EOSTokenIDs: []int{151645}}
}

// Gemma3_27B is the text model of Gemma 3 27B (google/gemma-3-27b-it text_config, as
// quoted in public config-parser tests: hidden
// 5376, MLP 21504, 62 layers, 32 query and 16 KV heads of 128, five sliding layers of
// 1024 to a global one, query_pre_attn_scalar 168, linear RoPE scaling 8 on the global
// layers, tied embeddings), bfloat16.
func Gemma3_27B() Config {
	return Config{Arch: "gemma3_text", VocabSize: 262208, HiddenSize: 5376, IntermediateSize: 21504, NumLayers: 62,
		NumHeads: 32, NumKVHeads: 16, HeadDim: 128, MaxPositions: 131072, RopeTheta: 1e6, RMSNormEps: 1e-6,
		TieWordEmbeddings: true, DType: "bfloat16", SlidingWindow: 1024, SlidingWindowPattern: 6,
		RopeLocalBaseFreq: 1e4, QueryPreAttnScalar: 168, RopeScaling: map[string]any{"rope_type": "linear", "factor": 8.0},
		BOSTokenID: intp(2), EOSTokenIDs: []int{1, 106}}
}

// GptOss20B is gpt-oss-20b (openai/gpt-oss-20b config.json, as transcribed in public
// model notes such as EchoCog/gpt-oss-20b's docs/gpt-oss-20b-architecture.md: hidden
// 2880, 24 layers alternating a 128-token window and full attention, 64 query and 8 KV
// heads of 64, 32 experts of 2880 of which 4 are picked, YaRN factor 32 over 4096
// positions, rope_theta 150000, untied head), bfloat16.
func GptOss20B() Config {
	return Config{Arch: "gpt_oss", VocabSize: 201088, HiddenSize: 2880, IntermediateSize: 2880, NumLayers: 24,
		NumHeads: 64, NumKVHeads: 8, HeadDim: 64, MaxPositions: 131072, RopeTheta: 150000, RMSNormEps: 1e-5,
		DType: "bfloat16", AttentionBias: true, NumExperts: 32, TopK: 4, SlidingWindow: 128,
		RopeScaling: map[string]any{"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
			"truncate": false, "original_max_position_embeddings": 4096},
		BOSTokenID: intp(199998), EOSTokenIDs: []int{200002, 199999}}
}

// Glm47Flash is GLM-4.7-Flash (zai-org/GLM-4.7-Flash config.json, as transcribed
// field by field in blap/Mod's src/inference_pio/models/glm_4_7_flash/config.py: hidden
// 2048, 47 layers the first dense (MLP 10240), 20 heads of multi-head latent attention
// (q rank 768, KV latent 512, no-rope heads of 192, rotary keys of 64, values of 256),
// 64 experts of 1536 of which 4 are picked, one shared expert, routed scaling 1.8, one
// MTP layer), bfloat16.
func Glm47Flash() Config {
	c := Config{Arch: "glm4_moe_lite", VocabSize: 154880, HiddenSize: 2048, IntermediateSize: 10240, NumLayers: 47,
		NumHeads: 20, NumKVHeads: 20, MaxPositions: 202752, RopeTheta: 1e6, RMSNormEps: 1e-5, DType: "bfloat16",
		NumExperts: 64, TopK: 4, MoEIntermediate: 1536, NormTopK: true, SharedExperts: 1, RoutedScaling: 1.8,
		NGroup: 1, TopKGroup: 1, FirstDense: 1, MTPLayers: 1,
		QLoraRank: 768, KVLoraRank: 512, QKNopeHeadDim: 192, QKRopeHeadDim: 64, VHeadDim: 256, RopeInterleave: true,
		EOSTokenIDs: []int{154820, 154827, 154829}}
	c.HeadDim = c.QKRopeHeadDim
	return c
}

// Glm45Air is GLM-4.5-Air (zai-org/GLM-4.5-Air config.json, as a slime model script for
// glm4.5-106B-A12B restates it and a public quantization tool's config fixture quotes it
// with n_routed_experts and mlp_layer_types: hidden 4096, 46 layers the first dense
// (MLP 10944), 96 query and 8 KV heads of 128 with q/k/v biases, half of each head
// rotated, 128 experts of 1408 of which 8 are picked, one shared expert, one MTP
// layer), bfloat16.
func Glm45Air() Config {
	return Config{Arch: "glm4_moe", VocabSize: 151552, HiddenSize: 4096, IntermediateSize: 10944, NumLayers: 46,
		NumHeads: 96, NumKVHeads: 8, HeadDim: 128, MaxPositions: 131072, RopeTheta: 1e6, RMSNormEps: 1e-5,
		DType: "bfloat16", AttentionBias: true, PartialRotary: 0.5,
		NumExperts: 128, TopK: 8, MoEIntermediate: 1408, NormTopK: true, SharedExperts: 1, RoutedScaling: 1,
		NGroup: 1, TopKGroup: 1, FirstDense: 1, MTPLayers: 1, EOSTokenIDs: []int{151329, 151336, 151338}}
}

// Gemma4E4B is the text model of Gemma 4 E4B (google/gemma-4-E4B-it text_config, as
// quoted in public Gemma 4 config parsers' fixtures: hidden 2560, MLP 10240 (not double
// wide), 42 layers, five sliding layers of 512 to a full one, 8 query and 2 KV heads of
// 256 (512 on full layers, a quarter rotated), per-layer embeddings of 256, the last 18
// layers reading earlier layers' KV, soft-capping 30, tied embeddings), in the
// multimodal layout, bfloat16.
func Gemma4E4B() Config {
	return Config{Arch: "gemma4", VocabSize: 262144, HiddenSize: 2560, IntermediateSize: 10240, NumLayers: 42,
		NumHeads: 8, NumKVHeads: 2, HeadDim: 256, GlobalHeadDim: 512, MaxPositions: 131072, RopeTheta: 1e6,
		RMSNormEps: 1e-6, TieWordEmbeddings: true, DType: "bfloat16", SlidingWindow: 512, SlidingWindowPattern: 6,
		RopeLocalBaseFreq: 1e4, PartialRotary: 0.25, KVSharedLayers: 18, PerLayerInput: 256,
		FinalLogitSoftcapping: 30, BOSTokenID: intp(2), EOSTokenIDs: []int{1, 106}}
}

// Gemma4_26B_A4B is the text model of Gemma 4 26B-A4B (google/gemma-4-26B-A4B-it
// text_config, as quoted in public Gemma 4 config fixtures: hidden 2816, MLP 2112 beside
// 128 experts of 704 of which 8 are picked, 30 layers, five sliding layers of 1024 to a
// full one, 16 query and 8 KV heads of 256, full layers with attention_k_eq_v over 2 KV
// heads of 512), in the multimodal layout, bfloat16.
func Gemma4_26B_A4B() Config {
	return Config{Arch: "gemma4", VocabSize: 262144, HiddenSize: 2816, IntermediateSize: 2112, NumLayers: 30,
		NumHeads: 16, NumKVHeads: 8, HeadDim: 256, GlobalHeadDim: 512, GlobalKVHeads: 2, AttentionKEqV: true,
		MaxPositions: 262144, RopeTheta: 1e6, RMSNormEps: 1e-6, TieWordEmbeddings: true, DType: "bfloat16",
		SlidingWindow: 1024, SlidingWindowPattern: 6, RopeLocalBaseFreq: 1e4, PartialRotary: 0.25,
		NumExperts: 128, TopK: 8, MoEIntermediate: 704, FinalLogitSoftcapping: 30,
		BOSTokenID: intp(2), EOSTokenIDs: []int{1, 106}}
}

// Gemma4_31B is the text model of Gemma 4 31B (google/gemma-4-31B-it text_config, as
// quoted in public Gemma 4 config fixtures: hidden 5376, MLP 21504, 60 layers, five
// sliding layers of 1024 to a full one, 32 query and 16 KV heads of 256, full layers
// with attention_k_eq_v over 4 KV heads of 512), in the multimodal layout, bfloat16.
func Gemma4_31B() Config {
	return Config{Arch: "gemma4", VocabSize: 262144, HiddenSize: 5376, IntermediateSize: 21504, NumLayers: 60,
		NumHeads: 32, NumKVHeads: 16, HeadDim: 256, GlobalHeadDim: 512, GlobalKVHeads: 4, AttentionKEqV: true,
		MaxPositions: 262144, RopeTheta: 1e6, RMSNormEps: 1e-6, TieWordEmbeddings: true, DType: "bfloat16",
		SlidingWindow: 1024, SlidingWindowPattern: 6, RopeLocalBaseFreq: 1e4, PartialRotary: 0.25,
		FinalLogitSoftcapping: 30, BOSTokenID: intp(2), EOSTokenIDs: []int{1, 106}}
}

// Cut returns the shape with layers decoder layers, keeping what makes the family's
// layers what they are: a mixture of experts keeps its dense first layers and every
// expert; Gemma 4's KV-shared layers keep their share of the depth (at least one), and
// the cut takes at least the layers that put a sliding and a full layer of their own
// before them (9 for E4B's 5:1 pattern with 2 shared layers).
func (c Config) Cut(layers int) Config {
	if c.gemma4() && c.KVSharedLayers > 0 && c.NumLayers > 0 {
		shared := max(1, (c.KVSharedLayers*layers+c.NumLayers/2)/c.NumLayers)
		layers = max(layers, c.SlidingWindowPattern+1+shared)
		c.KVSharedLayers = shared
	}
	c.NumLayers = layers
	return c
}

// Shapes are the real shapes by the names benchmarks take (MLXG_BENCH_FAMILY).
var Shapes = map[string]func() Config{
	"qwen3-8b":           Qwen3_8B,
	"qwen3-30b-a3b":      Qwen3_30B_A3B,
	"qwen3-next-80b-a3b": Qwen3Next80B,
	"gemma3-27b":         Gemma3_27B,
	"gpt-oss-20b":        GptOss20B,
	"glm-4.7-flash":      Glm47Flash,
	"glm-4.5-air":        Glm45Air,
	"gemma4-e4b":         Gemma4E4B,
	"gemma4-26b-a4b":     Gemma4_26B_A4B,
	"gemma4-31b":         Gemma4_31B,
	"ministral3-3b":      Ministral3_3B,
	"mistral-small-3":    MistralSmall3,
	"phi4-mini":          Phi4Mini,
	"phi4":               Phi4,
}
