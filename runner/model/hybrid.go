package model

import (
	"fmt"
	"slices"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
)

// Unwrap returns the backend's own context, so that compute.Ext finds the optional
// operations (mixture of experts, linear attention) it implements.
func (c *cancellable) Unwrap() compute.Context { return c.Context }

// CacheMaker is implemented by networks whose layers need caches of their own kinds
// (sliding-window layers, the recurrent state of linear-attention layers); NewCaches
// asks them instead of making a full-attention cache per layer.
type CacheMaker interface {
	NewCaches(fp32 bool) ([]kvstore.Layer, error)
}

// Network returns the built architecture, for tests and tools that inspect it (the
// expert routing of a mixture-of-experts layer, say).
func (m *Model) Network() Network { return m.net }

// fillCaches gives the layers that have no cache (kvstore.NewCaches leaves nil where a
// layer keeps no keys and values: a hybrid model's linear-attention layers) the
// network's own cache for them, in place, so the caches the KV policy makes work for
// hybrid models.
func (m *Model) fillCaches(caches []kvstore.Layer) error {
	if !slices.Contains(caches, nil) {
		return nil
	}
	cm, ok := m.net.(CacheMaker)
	if !ok {
		return fmt.Errorf("model: layer %d has no cache, and %s makes none of its own", slices.Index(caches, nil), m.Config.ModelType)
	}
	own, err := cm.NewCaches(false)
	if err != nil {
		return err
	}
	for i, c := range caches {
		if c == nil {
			caches[i] = own[i]
		}
	}
	return nil
}
