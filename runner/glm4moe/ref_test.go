package glm4moe_test

import (
	"testing"

	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// The fixture in testdata is written by testdata/ref.py on a machine with torch and
// transformers: tiny random GLM checkpoints (glm4_moe and glm4_moe_lite) made with
// save_pretrained (float32, Hugging Face's layout) and, per case and per variant (float,
// 4-bit, 8-bit), transformers' last-position logits of the prompt and its greedy
// continuation, in float64. The quantized variants' references are computed on the
// weights the converted checkpoint decodes to (ref.py repeats internal/quant's
// quantizer on what `mlxg create` quantizes).

// TestLogitsAgainstTransformers converts every case's checkpoint (float32, 4-bit and
// 8-bit in groups of 32) and checks it on the CPU backend with float32 caches
// (latent ones for glm4_moe_lite) against transformers (modeltest.CheckRef).
func TestLogitsAgainstTransformers(t *testing.T) {
	modeltest.CheckAgainstTransformers(t, cpu.New(2), "runner/glm4moe/testdata/ref.py", []string{"f32", "q4", "q8"}, nil)
}
