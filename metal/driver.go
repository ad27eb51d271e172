package metal

import (
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
)

// DriverName is the name the MLX backend is registered under (compute.Register):
// runner/backend opens it for MLXG_BACKEND=metal and mlx, and on a Mac by default.
const DriverName = "mlx"

func init() {
	compute.Register(DriverName, compute.DriverFunc(func(compute.OpenOptions) (compute.Backend, error) {
		lib, err := Open()
		if err != nil {
			return nil, err
		}
		return NewBackend(lib)
	}))
}

// ApplyMemoryPlan implements compute.MemoryPlanner: ApplyPlan without the previous
// limits, which only tests look at.
func (b *Backend) ApplyMemoryPlan(p kvstore.Plan) error {
	_, err := b.ApplyPlan(p)
	return err
}
