package runner

import (
	"testing"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
)

// testBackend is a backend the architecture tests run on, with its tolerance against
// transformers' logits.
type testBackend struct {
	name string
	open func(t *testing.T) compute.Backend // nil: LoadOptions' default, the CPU backend
	// Relative logit error allowed for float and for MLX-quantized weights: MLX runs
	// quantized products with fp16 activations (the scales' dtype), the CPU backend in
	// float32.
	tol, qtol float64
	exact     bool // results are bit-reproducible whatever the batch (the CPU backend)
}

// testBackends is the CPU backend and, where an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux) is set
// (metal/mlxtest), the MLX backend on it.
func testBackends() []testBackend {
	out := []testBackend{{name: "cpu", tol: 1e-3, qtol: 1e-3, exact: true}}
	if mlxtest.Enabled() {
		out = append(out, testBackend{name: "mlx", open: func(t *testing.T) compute.Backend { return mlxtest.Backend(t) }, tol: 1e-3, qtol: 2e-2})
	}
	return out
}

// int8Backend is the CPU backend with 8-bit inputs to its decode products (UseInt8), where
// this machine has the integer kernels: as reproducible as the plain CPU backend, and within
// MLX's tolerance of transformers (its quantized products run on fp16 inputs).
func int8Backend() []testBackend {
	if !quant.Int8Kernel() {
		return nil
	}
	open := func(t *testing.T) compute.Backend {
		b := cpu.New(2)
		b.UseInt8(true)
		return b
	}
	return []testBackend{{name: "cpu-int8", open: open, tol: 1e-3, qtol: 2e-2, exact: true}}
}

// load opens dir on b with LoadOptions o.
func (b testBackend) load(t *testing.T, dir string, o LoadOptions) (*Engine, error) {
	if b.open != nil {
		o.Backend = b.open(t)
	}
	return LoadModel(dir, o)
}
