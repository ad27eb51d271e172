package phi3_test

import (
	"testing"

	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// The fixtures in testdata are written by testdata/ref.py on a machine with torch and
// transformers: tiny random phi3 checkpoints (Phi-4-mini's shape of partial rotary,
// longrope, tied embeddings; and one with a sliding window) made with save_pretrained in
// float32, and per case and variant transformers' last-position logits of the prompt and
// its greedy continuation decoded through the cache (across longrope's switch, which
// transformers then makes position by position as mlxg does), in float64. The quantized
// variants' references run transformers on the weights `mlxg create` quantizes,
// quantized and dequantized by ref.py as internal/quant does.

// TestLogitsAgainstTransformers converts every case with create (f32, q4 and q8 in
// groups of 32) and checks it against transformers (modeltest.CheckRef).
func TestLogitsAgainstTransformers(t *testing.T) {
	modeltest.CheckAgainstTransformers(t, cpu.New(2), "runner/phi3/testdata/ref.py", []string{"f32", "q4", "q8"}, nil)
}
