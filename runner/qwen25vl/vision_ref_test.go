package qwen25vl_test

import (
	"testing"

	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// TestVisionReference checks the Qwen2.5-VL tower (windowed attention included) and image
// prompts against transformers (modeltest.CheckVision), their M-RoPE positions included.
func TestVisionReference(t *testing.T) {
	modeltest.CheckVision(t, cpu.New(2), modeltest.VisionRef{
		Script: "runner/qwen25vl/testdata/vision_ref.py", Needs: "transformers 5, torch, Pillow",
		MRoPE: true,
	})
}
