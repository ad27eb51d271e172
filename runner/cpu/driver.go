package cpu

import "github.com/mlxg/mlxg/runner/compute"

// DriverName is the name the CPU backend is registered under (compute.Register), the
// value of MLXG_BACKEND that forces it.
const DriverName = "cpu"

func init() {
	compute.Register(DriverName, compute.DriverFunc(func(o compute.OpenOptions) (compute.Backend, error) {
		return New(o.Threads), nil
	}))
}
