package metal

import (
	"strconv"

	"github.com/mlxg/mlxg/kvstore"
)

// LimitsFor turns the memory policy's plan for a load into MLX allocator limits:
//   - wired: the weights and the KV cache at the plan's context stay resident;
//   - cache: freed buffers kept for reuse are bounded by the plan's overhead, the room
//     it set aside for activations, so they never eat into the KV budget;
//   - memory: left to MLX (zero), whose default follows the GPU's working set.
//
// A model in streaming mode is planned with its weight budget as its weights, so the
// wired limit is the budget plus the KV cache. Of its experts, only the slots are MLX
// buffers (stream.go), so only they can be wired, beside the pinned non-expert weights;
// the residency manager's read buffers are the process's own memory, which MLX never
// wires. When the budget shrinks under pressure the slots shrink at their layer's next
// pass, and the wired bytes with them, under the limit set at load.
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
//
// MLX's limits are process-wide while each loaded model has a Backend of its own, so
// the wired limit set is the sum over the library's live backends, capped at the
// device's max_recommended_working_set_size (MLX refuses a larger one, and a plan
// that fits the RAM may still exceed the GPU's working set). Closing a backend
// lowers it again. The cache limit is the largest of theirs.
func (b *Backend) ApplyPlan(p kvstore.Plan) (MemoryLimits, error) {
	var prev MemoryLimits
	// The plans are read and written with the Lib's mutex held, on the worker, like
	// every other MLX call: one lock, so no order between two of them to get wrong.
	err := b.do(func() (err error) {
		if b.lib.plans == nil {
			b.lib.plans = map[*Backend]MemoryLimits{}
		}
		b.lib.plans[b] = LimitsFor(p)
		prev, err = b.lib.setLimits(b.lib.combinedLimits(b.info))
		return err
	})
	return prev, err
}

// releasePlan drops b's share of the limits (at Close, on the worker, with the Lib's
// mutex held).
func (b *Backend) releasePlan() error {
	if _, ok := b.lib.plans[b]; !ok {
		return nil
	}
	delete(b.lib.plans, b)
	// setLimits leaves a zero alone; here zero is meant: nothing left to keep resident.
	var old uintptr
	return status("mlx_set_wired_limit", b.lib.setWiredLimit(&old, uintptr(b.lib.combinedLimits(b.info).Wired)))
}

// combinedLimits is the limits of every live plan together, the wired one capped at
// the device's recommended working set (info's max_recommended_working_set_size).
func (l *Lib) combinedLimits(info map[string]string) MemoryLimits {
	var out MemoryLimits
	for _, p := range l.plans {
		out.Wired += p.Wired
		out.Cache = max(out.Cache, p.Cache)
	}
	if ws, err := strconv.ParseUint(info["max_recommended_working_set_size"], 10, 64); err == nil && ws > 0 && out.Wired > ws {
		out.Wired = ws
	}
	return out
}

// Memory is what MLX's allocator holds (Lib.Memory): the process's counters, shared by
// every backend on the library, so a peak read here is one backend's only where it runs
// alone.
func (b *Backend) Memory() (MemoryUse, error) { return b.lib.Memory() }

// ResetPeakMemory starts MLX's peak over from what the allocator holds now, so that a
// later Memory's Peak is the most held since (e.g. over one pass).
func (b *Backend) ResetPeakMemory() error { return b.lib.ResetPeak() }
