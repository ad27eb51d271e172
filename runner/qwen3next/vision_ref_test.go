package qwen3next_test

import (
	"testing"

	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// TestVisionReference checks the Qwen3.5 tower and image prompts against transformers
// (modeltest.CheckQwenVision).
func TestVisionReference(t *testing.T) {
	modeltest.CheckQwenVision(t, cpu.New(2), "runner/qwen3next/testdata/vision_ref.py")
}
