package mistral_test

import (
	"testing"

	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// The fixtures in testdata are written by testdata/ref.py on a machine with torch and
// transformers: tiny random mistral, ministral3 and mistral3 checkpoints (the last in
// transformers 5's layout, with a vision tower) made with save_pretrained in float32, and
// per case and variant transformers' last-position logits of a prompt longer than the
// sliding window and the query scale's period, and its greedy continuation decoded through
// the cache, in float64. The quantized variants' references run transformers on the
// weights `mlxg create` quantizes, quantized and dequantized by ref.py as internal/quant
// does.

// TestLogitsAgainstTransformers converts every case with create (f32, q4 and q8 in
// groups of 32) and checks it against transformers (modeltest.CheckRef).
func TestLogitsAgainstTransformers(t *testing.T) {
	modeltest.CheckAgainstTransformers(t, cpu.New(2), "runner/mistral/testdata/ref.py", []string{"f32", "q4", "q8"}, nil)
}
