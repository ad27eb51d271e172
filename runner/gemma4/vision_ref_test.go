package gemma4_test

import (
	"testing"

	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// TestVisionReference checks Gemma 4's image input against transformers
// (modeltest.CheckVision): pixel_values and patch positions of the images (the resize rule
// and Pillow's bicubic reproduced), their token counts, the image features, and the last
// position's logits for prompts with 0, 1 and 2 images; with images the logits must also be
// far from transformers' without the bidirectional image mask.
func TestVisionReference(t *testing.T) {
	modeltest.CheckVision(t, cpu.New(2), modeltest.VisionRef{
		Script: "runner/gemma4/testdata/vision_ref.py", Needs: "transformers 5 with Gemma 4, torch, Pillow",
		Patches: true, ImageMask: true,
	})
}
