package metal_test

import (
	"testing"

	"github.com/mlxg/mlxg/metal"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/runner/backend"
	"github.com/mlxg/mlxg/runner/cpu"
)

// The doctor's checks on MLX itself (an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux); on Linux MLX's CPU).

func TestEveryOpOnRealMLX(t *testing.T) {
	b := mlxtest.Backend(t)
	t.Logf("backend %s", b.Name())
	res, err := backend.CheckOps(b, cpu.New(2), precision(b), 7)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !r.OK() {
			t.Errorf("%s vs %s: relative error %.3g (tolerance %.0e), %v", r.Check, r.Against, r.RelErr, r.Tol, r.Err)
		} else {
			t.Logf("%-40s %.2e", r.Check, r.RelErr)
		}
	}
}

// precision is how b computes: MLX's CPU in float32 (Backend.wide), held to the CPU
// backend's tolerances; a GPU runs products with fp16/bf16 activations.
func precision(b *metal.Backend) backend.Precision {
	if b.Device() == "cpu" {
		return backend.Float32
	}
	return backend.Reduced
}
