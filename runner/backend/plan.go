package backend

import (
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/metal"
	"github.com/mlxg/mlxg/runner/compute"
)

// planner is a backend that manages its own memory from the KV policy's plan (Metal:
// the allocator's wired and cache limits).
type planner interface {
	ApplyPlan(kvstore.Plan) (metal.MemoryLimits, error)
}

// ApplyPlan hands the policy's plan for a model being loaded to a backend that sets
// memory limits from it; a backend without limits (CPU) is left alone.
func ApplyPlan(b compute.Backend, p kvstore.Plan) error {
	if pl, ok := b.(planner); ok {
		_, err := pl.ApplyPlan(p)
		return err
	}
	return nil
}
