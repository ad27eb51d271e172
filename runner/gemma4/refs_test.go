package gemma4_test

import (
	"testing"

	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// The fixtures in testdata are written by testdata/ref.py on a machine with torch and
// transformers 5.x: tiny random Gemma 4 checkpoints made with save_pretrained (float32,
// in Hugging Face's layout) and, per case and per variant, transformers' last-position
// logits of the prompt and its greedy continuation, in float64. The quantized variants'
// references run transformers on the weights the converted checkpoint decodes to (ref.py
// repeats internal/quant's arithmetic).

// TestLogitsAgainstTransformers converts every case's checkpoint (float32, 4-bit and
// 8-bit in groups of 32) and checks it on the CPU backend with float32 caches
// (the sliding layers' window kept exactly) against transformers (modeltest.CheckRef).
func TestLogitsAgainstTransformers(t *testing.T) {
	modeltest.CheckAgainstTransformers(t, cpu.New(2), "runner/gemma4/testdata/ref.py", []string{"f32", "q4", "q8"}, nil)
}
