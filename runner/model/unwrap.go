package model

import "github.com/mlxg/mlxg/runner/compute"

// Unwrap returns the backend's own context, so that compute.Ext finds the optional
// operations (mixture of experts, linear attention) it implements.
func (c *cancellable) Unwrap() compute.Context { return c.Context }
