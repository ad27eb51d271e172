package model

import (
	"fmt"
	"strings"
	"sync"

	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/vision"
)

var (
	visionMu    sync.Mutex
	visionTower = map[string]string{} // model_type -> the prefix of its vision tower's weights
)

// RegisterVision says that an architecture reads images through a vision tower whose weights' keys
// start with prefix.
func RegisterVision(modelType, prefix string) {
	visionMu.Lock()
	defer visionMu.Unlock()
	visionTower[modelType] = prefix
}

// VisionPrefix is the tower prefix registered for a model_type ("" when it reads text only).
func VisionPrefix(modelType string) string {
	visionMu.Lock()
	defer visionMu.Unlock()
	return visionTower[modelType]
}

// HasVision reports whether the checkpoint in dir reads images: its architecture has a vision tower
// mlxg implements, the checkpoint holds that tower's weights (a text-only conversion drops them) and
// its image preprocessing is one the vision package knows.
func HasVision(dir string) bool {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return false
	}
	prefix := VisionPrefix(cfg.ModelType)
	if prefix == "" {
		return false
	}
	if _, err := vision.LoadProcessor(dir); err != nil {
		return false
	}
	hs, err := safetensors.ReadDirHeaders(dir)
	if err != nil {
		return false
	}
	for _, h := range hs {
		for _, t := range h.Tensors {
			if strings.HasPrefix(t.Name, prefix) {
				return true
			}
		}
	}
	return false
}

// The engine keeps the features of recently encoded images by the hash of their pixels (runner's
// feature cache): at most FeatureCacheImages images and FeatureCacheBytes of features (a 1024×768
// image on Qwen3.5-35B-A3B is 6 MiB of features; a 16-megapixel one 128 MiB).
const (
	FeatureCacheImages = 32
	FeatureCacheBytes  = 256 << 20
)

// VisionMemory is what a checkpoint's vision tower takes in memory beside the language model, for
// the memory plan (mlxg fit, mlxg ps, /api/ps).
type VisionMemory struct {
	Weights int64 // the tower's tensors, part of the checkpoint's weights
	// Encode is the peak of one encoding pass over the largest image the processor makes
	// (MaxPatches patches): the engine encodes images in passes of at most that many.
	Encode     int64
	MaxPatches int
	MaxPixels  int // the processor's pixel budget the estimate is for
	// CheckpointPixels is the checkpoint's own budget (above MaxPixels when the plan lowered it).
	CheckpointPixels int
	// Features is the most the feature cache holds: FeatureCacheImages of the largest image's
	// features, at most FeatureCacheBytes.
	Features int64
}

// Activations is what encoding images adds to the plan's peak beside the weights.
func (v VisionMemory) Activations() int64 { return v.Encode + v.Features }

// VisionEstimate is an architecture's estimate of its tower's memory from config.json and the
// image processor: the patches of the largest image, the peak bytes of a pass that encodes it, and
// the bytes of its features.
type VisionEstimate func(cfg *Config, proc *vision.Processor) (patches int, encode, features int64, err error)

var visionEstimates = map[string]VisionEstimate{}

// RegisterVisionMemory gives a model_type's estimate of its tower's memory.
func RegisterVisionMemory(modelType string, f VisionEstimate) {
	visionMu.Lock()
	defer visionMu.Unlock()
	visionEstimates[modelType] = f
}

// VisionMemoryOf is the vision tower's memory for the checkpoint in dir: zero when it reads text
// only (HasVision false).
func VisionMemoryOf(dir string) (VisionMemory, error) { return VisionMemoryFor(dir, 0) }

// VisionMemoryFor is VisionMemoryOf with the processor's pixel budget lowered to maxPixels an image
// (0: the checkpoint's own), as runner.LoadOptions.ImagePixels lowers it.
func VisionMemoryFor(dir string, maxPixels int) (VisionMemory, error) {
	cfg, err := ReadConfig(dir)
	if err != nil || !HasVision(dir) {
		return VisionMemory{}, nil
	}
	visionMu.Lock()
	est, prefix := visionEstimates[cfg.ModelType], visionTower[cfg.ModelType]
	visionMu.Unlock()
	var v VisionMemory
	hs, err := safetensors.ReadDirHeaders(dir)
	if err != nil {
		return v, err
	}
	for _, h := range hs {
		for _, t := range h.Tensors {
			if strings.HasPrefix(t.Name, prefix) {
				v.Weights += t.End - t.Begin
			}
		}
	}
	if est == nil {
		return v, nil
	}
	proc, err := vision.LoadProcessor(dir)
	if err != nil {
		return v, err
	}
	v.CheckpointPixels = proc.MaxPixels
	if proc.Kind == "qwen" && maxPixels > 0 && maxPixels < proc.MaxPixels {
		proc.MaxPixels = max(maxPixels, proc.MinPixels)
	}
	v.MaxPixels = proc.MaxPixels
	patches, encode, features, err := est(cfg, proc)
	if err != nil {
		return v, fmt.Errorf("%s's vision tower: %w", dir, err)
	}
	v.MaxPatches, v.Encode = patches, encode
	v.Features = min(FeatureCacheBytes, FeatureCacheImages*features)
	return v, nil
}
