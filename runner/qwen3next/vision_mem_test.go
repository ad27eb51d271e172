package qwen3next_test

import (
	"testing"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/qwen3next"
	"github.com/mlxg/mlxg/vision"
)

// TestVisionMemory: the memory plan's tower figures (model.VisionMemoryOf) are the tower's tensor bytes,
// the pixel budget's largest image (max_pixels/patch² patches) and its features times the feature cache's
// images; the estimate of the CPU backend's buffers while encoding that image bounds what the backend
// counts it held at once (ActivationPeak) without being more than 1.1 times it, for the tiny tower and a
// wider one; several largest images encode in passes of one, so their peak is one image's.
func TestVisionMemory(t *testing.T) {
	for _, v := range []randmodel.QwenVision{randmodel.TinyQwenVision(), wideTower()} {
		m := visionModelWith(t, v)
		vm, err := model.VisionMemoryOf(m.Dir)
		if err != nil {
			t.Fatal(err)
		}
		weights := modeltest.TowerBytes(t, m.Dir, "") // the tower alone
		patches := v.MaxPixels / (v.Patch * v.Patch)
		features := int64(4 * patches / (v.Merge * v.Merge) * m.Config.HiddenSize)
		if vm.Weights != weights || vm.MaxPatches != patches || vm.MaxPixels != v.MaxPixels ||
			vm.Features != min(model.FeatureCacheBytes, model.FeatureCacheImages*features) || vm.Encode <= 0 {
			t.Fatalf("%+v; want weights %d, %d patches, features %d", vm, weights, patches, model.FeatureCacheImages*features)
		}
		vc := qwen3next.VisionConfig{Depth: v.Depth, Hidden: v.Hidden, Intermediate: v.Intermediate, Heads: v.Heads, InChannels: v.InChannels,
			Patch: v.Patch, Merge: v.Merge, Temporal: v.Temporal, Out: m.Config.HiddenSize}
		buffers := qwen3next.EncodeBuffers(vc, patches)
		if buffers >= vm.Encode {
			t.Fatalf("the backend's part %d of an estimate of %d", buffers, vm.Encode)
		}

		// The largest image: a square of max_pixels.
		side := 1
		for (side+1)*(side+1) <= v.MaxPixels {
			side++
		}
		measure := func(images ...vision.Image) int64 {
			peak, spans := modeltest.EncodePeak(t, m, images...)
			if n := spans[0].N() * v.Merge * v.Merge; n != patches {
				t.Fatalf("the %d×%d image has %d patches, want the budget's %d", side, side, n, patches)
			}
			return peak
		}
		one := measure(testImage(side, side, 4))
		t.Logf("%d×%d tower, largest image (%d patches): the backend held at most %d bytes, estimated %d (%.2f×); %d with the host's",
			v.Depth, v.Hidden, patches, one, buffers, float64(buffers)/float64(one), vm.Encode)
		if buffers < one || buffers > one+one/10 {
			t.Errorf("estimate %d bytes for a peak of %d", buffers, one)
		}
		if three := measure(testImage(side, side, 5), testImage(side, side, 6), testImage(side, side, 7)); three > one+one/10 {
			t.Errorf("three largest images: a peak of %d bytes, one's %d: not encoded in passes of one", three, one)
		}
	}
}

// wideTower is a tower whose rows, not the attention scores, are most of its activations: 4 blocks 128
// wide, an MLP 4 times wider.
func wideTower() randmodel.QwenVision {
	v := randmodel.TinyQwenVision()
	v.Depth, v.Hidden, v.Intermediate, v.Heads = 2, 128, 512, 4
	return v
}
