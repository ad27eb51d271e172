package qwen3next_test

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// TestVisionMemory: the memory plan's tower figures (model.VisionMemoryOf) are the tower's tensor
// bytes, the pixel budget's largest image (max_pixels/patch² patches), its features times the
// feature cache's images, and an encode peak that bounds what the CPU backend allocates to encode
// that image (every byte Go allocated during the pass: the backend's buffers, the host arrays and
// the garbage) without being more than twice it. Several largest images encode in passes of one, so
// their peak is one image's.
func TestVisionMemory(t *testing.T) {
	v := randmodel.TinyQwenVision()
	m := visionModelWith(t, v)
	vm, err := model.VisionMemoryOf(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	h, err := safetensors.ReadHeader(filepath.Join(m.Dir, "vision.safetensors")) // the tower alone
	if err != nil {
		t.Fatal(err)
	}
	var weights int64
	for _, tn := range h.Tensors {
		weights += tn.End - tn.Begin
	}
	patches := v.MaxPixels / (v.Patch * v.Patch)
	features := int64(4 * patches / (v.Merge * v.Merge) * m.Config.HiddenSize)
	if vm.Weights != weights || vm.MaxPatches != patches || vm.Features != min(model.FeatureCacheBytes, model.FeatureCacheImages*features) || vm.Encode <= 0 {
		t.Fatalf("%+v; want weights %d, %d patches, features %d", vm, weights, patches, model.FeatureCacheImages*features)
	}

	// The largest image: a square of max_pixels.
	side := 1
	for (side+1)*(side+1) <= v.MaxPixels {
		side++
	}
	big := testImage(side, side, 4)
	ctx := context.Background()
	measure := func(images []vision.Image) (uint64, []model.Span) {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		spans, err := m.EncodeImages(ctx, images)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		return after.TotalAlloc - before.TotalAlloc, spans
	}
	one, spans := measure([]vision.Image{big})
	if n := spans[0].N() * v.Merge * v.Merge; n != patches {
		t.Fatalf("the %d×%d image has %d patches, want the budget's %d", side, side, n, patches)
	}
	t.Logf("largest image (%d patches): allocated %d bytes, estimate %d (%.2f×)", patches, one, vm.Encode, float64(vm.Encode)/float64(one))
	if uint64(vm.Encode) < one || uint64(vm.Encode) > 2*one {
		t.Errorf("estimate %d bytes for an encode that allocated %d", vm.Encode, one)
	}
	// Three such images: three passes whose buffers the backend reuses, so the allocations grow
	// by the host arrays and results only, not threefold.
	three, _ := measure([]vision.Image{big, testImage(side, side, 5), testImage(side, side, 6)})
	t.Logf("three largest images: allocated %d bytes", three)
	if three > 2*one {
		t.Errorf("three largest images allocated %d bytes, one %d: not encoded in passes of one", three, one)
	}
}
