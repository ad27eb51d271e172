package server

// A checkpoint directory loaded in the caller's process (`mlxg run DIR`) through the same
// EngineLoader, and so the same plan, as a served model: the KV policy's layout and context,
// streaming mode when the weights do not fit, a draft model.

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner"
)

// DirModel is a checkpoint directory as the loader takes a model: named after the directory,
// its size the bytes of its safetensors files (the weights the plan counts).
func DirModel(dir string) (*registry.LocalModel, error) {
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return nil, fmt.Errorf("%s is not a checkpoint directory: %w", dir, err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return nil, err
	}
	var size int64
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return nil, err
		}
		size += fi.Size()
	}
	return &registry.LocalModel{Name: dir, Dir: dir, Size: size}, nil
}

// Engine is the runner engine behind a model EngineLoader.Load returned (nil for another
// Model), for a caller that drives generation itself. The model still owns it: Close the
// model, not the engine.
func Engine(m Model) *runner.Engine {
	if em, ok := m.(*engineModel); ok {
		return em.e
	}
	return nil
}
