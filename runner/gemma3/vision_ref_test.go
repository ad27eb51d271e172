package gemma3_test

import (
	"testing"

	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// TestVisionReference checks Gemma 3's image input against transformers
// (modeltest.CheckVision): pixel_values of the images (Pillow's bilinear resize
// reproduced), the image features, and the last position's logits for prompts with 0, 1
// and 2 images; with images the logits must also be far from transformers' without the
// bidirectional image mask.
func TestVisionReference(t *testing.T) {
	modeltest.CheckVision(t, cpu.New(2), modeltest.VisionRef{
		Script: "runner/gemma3/testdata/vision_ref.py", Needs: "transformers 5, torch, Pillow",
		ImageMask: true,
	})
}
