package model

import (
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
