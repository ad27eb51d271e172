package gemma3_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/mlxg/mlxg/vision"
)

// BenchmarkEncode4B encodes one 1024×768 image with a tower of Gemma 3 4B's shape (SigLIP
// 27 layers × 1152 wide, 896×896 pixels in 14-pixel patches: 4,096 patches pooled to 256
// tokens; random float32 weights) on the CPU backend with every core. Writing the tower
// takes some 1.7 GB of disk and a minute.
//
//	go test ./runner/gemma3 -run '^$' -bench Encode4B -benchtime 3x
func BenchmarkEncode4B(b *testing.B) {
	v := smallVision()
	v.Hidden, v.Intermediate, v.Layers, v.Heads, v.ImageSize, v.Patch, v.Tokens = 1152, 4304, 27, 16, 896, 14, 256
	m := visionModelWith(b, v, runtime.NumCPU())
	im := testImage(1024, 768, 4)
	if _, err := m.EncodeImages(context.Background(), []vision.Image{im}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := m.EncodeImages(context.Background(), []vision.Image{im}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/image")
	b.ReportMetric(float64(runtime.NumCPU()), "threads")
}
