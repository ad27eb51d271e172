package qwen25vl_test

import (
	"testing"

	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// TestVisionReference checks the Qwen2.5-VL tower (windowed attention included) and image
// prompts against transformers (modeltest.CheckQwenVision).
func TestVisionReference(t *testing.T) {
	modeltest.CheckQwenVision(t, cpu.New(2), "runner/qwen25vl/testdata/vision_ref.py")
}
