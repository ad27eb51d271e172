package model

import (
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
