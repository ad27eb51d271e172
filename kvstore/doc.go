// Package kvstore holds the KV cache: per-layer layout and bit-widths, the memory policy,
// paged blocks and the RAM and SSD prefix tiers.
//
// Cache kinds, each a Layer that attends over its own storage: Full (fp16 or float32),
// Quantized (full attention in any Spec), Rotating (sliding window, and every layer under
// --max-kv-size, in any Spec) and Recurrent (the fixed-size state of a hybrid model's
// linear-attention layers). A latent layer (multi-head latent attention: LayerLatent)
// is a Full or Quantized cache of one KV head holding the rotary key as keys and the
// compressed latent as values, attended with Attention.QV (latent.go). A Spec stores keys and values separately in fp16, MLX affine
// quantization along head_dim (2, 3, 4, 5, 6 or 8 bits, groups of 32, 64 or 128, fp16
// scale and bias; internal/quant's bit layout) or q4_0 (blocks of 32, one fp16 scale);
// a cache may stay fp16 until quantized_kv_start positions. Quantized kinds never make a
// full-size float copy: at decode on amd64 they score keys and sum values straight from
// 4-bit, 8-bit and q4_0 codes (fused AVX2 kernels); elsewhere, and in prefill, they
// dequantize one tile of one head at a time inside the attention loop.
//
// A Layout assigns a Spec to every layer with KV, the first and last boundary layers
// counted over those layers; NewCaches builds a sequence's caches from it. Options hold
// the user's settings, parsed from the --kv-* flags (which cmd/mlxg binds to Options.Set)
// and the MLXG_KV_* / OLLAMA_KV_CACHE_TYPE variables (ApplyEnv); Choose (and Policy,
// with a fresh sysmem reading per call) picks the layout, the largest context that fits
// and the prefix cache's budget from the model's shape (ShapeFromConfig), the memory
// available and the pressure level.
package kvstore
