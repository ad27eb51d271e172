package qwen3next_test

import (
	"testing"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/runnertest"
)

// BenchmarkImage1024x768 is runnertest.Image1024x768 with the tiny random Qwen3.5 and a tiny
// tower (registry/randmodel's TinyQwenVision: 2 blocks, 32 wide) of Qwen3.5's patch geometry
// (16-pixel patches, 2×2 merge, a 48×48 position grid, its default pixel budget, under which
// 1024×768 keeps its size: 3,072 patches, 768 tokens); the same-length text prompt replaces
// the image's rows by words. Run with -benchtime=Nx:
//
//	go test ./runner/qwen3next -run '^$' -bench Image1024x768 -benchtime 9x
func BenchmarkImage1024x768(b *testing.B) {
	v := randmodel.TinyQwenVision()
	v.Patch, v.NumPositions, v.MinPixels, v.MaxPixels = 16, 2304, 65536, 16777216
	runnertest.Image1024x768(b, visionCheckpointWith(b, v), 0)
}
