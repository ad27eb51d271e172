package metal

import (
	"fmt"

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

// JoinDistributed implements compute.Distributed over JoinGroup.
func (b *Backend) JoinDistributed(transport string) (compute.Group, error) {
	g, err := b.JoinGroup(transport)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// UseDistributed implements compute.Distributed over UseGroup; g must come from
// JoinDistributed on an MLX backend.
func (b *Backend) UseDistributed(g compute.Group) error {
	mg, ok := g.(*Group)
	if !ok {
		return fmt.Errorf("metal: UseDistributed of a %T, not a group MLX joined", g)
	}
	return b.UseGroup(mg)
}
