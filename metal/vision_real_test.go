package metal_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/metal"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// TestTowerMemoryOnMLX: encoding an image holds about one tower block's activations at
// a time (Free's barriers, metal/vision.go), not every block's: a tower of 8 blocks
// raises MLX's peak memory little above one of 2 blocks, over a 256×256 image (4,096
// patches of a tower 128 wide). Without the barriers the peak grows with the depth.
func TestTowerMemoryOnMLX(t *testing.T) {
	lib := mlxtest.Lib(t)
	open := mlxtest.Opener(t)
	dir := t.TempDir()
	write := func(depth int) string {
		v := randmodel.QwenVision{Depth: depth, Hidden: 128, Act: "gelu_pytorch_tanh", Intermediate: 256, Heads: 4, InChannels: 3,
			Patch: 4, Merge: 2, Temporal: 2, NumPositions: 16, MinPixels: 16 * 64, MaxPixels: 1024 * 64}
		hf, out := filepath.Join(dir, "hf", string(rune('a'+depth))), filepath.Join(dir, "mlx", string(rune('a'+depth)))
		if err := randmodel.GenerateQwen35(hf, randmodel.TinyQwen3Next(256), &v, randmodel.Options{Seed: 4}); err != nil {
			t.Fatal(err)
		}
		if _, err := create.Convert(context.Background(), hf, out, create.Options{}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	img := vision.NewRGB(256, 256)
	for i := range img.Pix {
		img.Pix[i] = uint8(i*13 + i/7)
	}
	im := vision.NewImage(img)
	encode := func(dir string) (peak uint64) {
		b, err := open()
		if err != nil {
			t.Fatal(err)
		}
		m, err := model.Load(dir, b)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		spans, err := m.EncodeImages(context.Background(), []vision.Image{im})
		if err != nil {
			t.Fatal(err)
		}
		if spans[0].Grid != [3]int{1, 32, 32} {
			t.Fatalf("grid %v, want 32×32 tokens (4,096 patches)", spans[0].Grid)
		}
		mem, err := lib.Memory()
		if err != nil {
			t.Fatal(err)
		}
		b.(*metal.Backend).Close()
		return mem.Peak
	}
	shallow, deep := write(2), write(8)
	before, err := lib.Memory()
	if err != nil {
		t.Fatal(err)
	}
	p2 := encode(shallow)
	p8 := encode(deep) // the peak so far: at least p2
	g2, g8 := float64(p2-before.Active), float64(p8-before.Active)
	t.Logf("peak above the start: %.1f MiB with 2 blocks, %.1f MiB with 8", g2/(1<<20), g8/(1<<20))
	if g8 > 1.5*g2 {
		t.Errorf("8 blocks peak at %.1f MiB, 2 blocks at %.1f MiB: the tower's activations are held beyond their block", g8/(1<<20), g2/(1<<20))
	}
}
