package backend

import (
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
)

// ApplyPlan hands the policy's plan for a model being loaded to a backend that sets
// memory limits from it (compute.MemoryPlanner: MLX's allocator limits); a backend
// without limits (CPU) is left alone.
func ApplyPlan(b compute.Backend, p kvstore.Plan) error {
	if pl, ok := b.(compute.MemoryPlanner); ok {
		return pl.ApplyMemoryPlan(p)
	}
	return nil
}
