// Package mlxtest opens the real libmlxc for tests that run the MLX backend on MLX itself
// (on Linux, an MLX the user installed, e.g. with its CPU backend). MLXG_MLXC_PATH names the
// library; without it such tests skip, unless MLXG_REQUIRE_MLX=1 (scripts/test sets it),
// where a missing library fails them.
package mlxtest

import (
	"os"
	"testing"

	"github.com/mlxg/mlxg/metal"
	"github.com/mlxg/mlxg/runner/compute"
)

// Required reports whether a missing libmlxc fails tests instead of skipping them.
func Required() bool { return os.Getenv("MLXG_REQUIRE_MLX") == "1" }

// Lib returns the real libmlxc, or skips (fails when Required) where there is none.
func Lib(t testing.TB) *metal.Lib {
	t.Helper()
	if os.Getenv(metal.EnvPath) == "" {
		if Required() {
			t.Fatalf("MLXG_REQUIRE_MLX=1 but %s is not set: point it at an installed libmlxc (docs/backends.md)", metal.EnvPath)
		}
		t.Skipf("%s is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)", metal.EnvPath)
	}
	l, err := metal.Open()
	if err != nil {
		t.Fatalf("loading libmlxc: %v", err)
	}
	return l
}

// Backend starts an MLX backend on the real library, closed when the test ends.
func Backend(t testing.TB) *metal.Backend {
	t.Helper()
	b, err := metal.NewBackend(Lib(t))
	if err != nil {
		t.Fatalf("starting the MLX backend: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// Opener returns a function opening a fresh MLX backend per call (one per model, as
// serve does), each closed by its user or when the test ends.
func Opener(t testing.TB) func() (compute.Backend, error) {
	t.Helper()
	lib := Lib(t)
	return func() (compute.Backend, error) {
		b, err := metal.NewBackend(lib)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { b.Close() })
		return b, nil
	}
}

// Enabled reports whether tests on real MLX run here: MLXG_MLXC_PATH is set, or
// MLXG_REQUIRE_MLX=1 makes its absence a failure.
func Enabled() bool { return os.Getenv(metal.EnvPath) != "" || Required() }
