package metal

import "github.com/mlxg/mlxg/kvstore"

// LimitsFor turns the memory policy's plan for a load into MLX allocator limits:
//   - wired: the weights and the KV cache at the plan's context stay resident (on the
//     GPU side the KV cache is the device mirror, the same size as the plan's KV);
//   - cache: freed buffers kept for reuse are bounded by the plan's overhead, the room
//     it set aside for activations, so they never eat into the KV budget;
//   - memory: left to MLX (zero), whose default follows the GPU's working set.
func LimitsFor(p kvstore.Plan) MemoryLimits {
	var l MemoryLimits
	if w := p.Weights + p.KVBytes; w > 0 {
		l.Wired = uint64(w)
	}
	if p.Overhead > 0 {
		l.Cache = uint64(p.Overhead)
	}
	return l
}

// ApplyPlan sets the allocator limits for plan and returns the previous ones.
func (b *Backend) ApplyPlan(p kvstore.Plan) (MemoryLimits, error) {
	return b.lib.SetLimits(LimitsFor(p))
}
