package gemma3_test

import (
	"testing"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/runnertest"
)

// BenchmarkImage1024x768 is runnertest.Image1024x768 with the tiny random Gemma 3 of Gemma 3's
// vocabulary and a tiny tower (2 layers, 32 wide) of Gemma 3's geometry (896×896 pixels in
// 14-pixel patches: 4,096 patches pooled to 256 tokens); the same-length text prompt counts 4
// words for the frame around the image's rows. Run with -benchtime=Nx:
//
//	go test ./runner/gemma3 -run '^$' -bench Image1024x768 -benchtime 5x
func BenchmarkImage1024x768(b *testing.B) {
	v := randmodel.TinyGemma3Vision()
	v.ImageSize, v.Patch, v.Tokens = 896, 14, 256
	runnertest.Image1024x768(b, visionCheckpointWith(b, v), 4)
}
