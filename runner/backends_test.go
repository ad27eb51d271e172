package runner

import (
	"testing"

	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/runner/compute"
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
}

// testBackends is the CPU backend and, where scripts/mlx/build.sh's libmlxc is set
// (metal/mlxtest), the MLX backend on it.
func testBackends() []testBackend {
	out := []testBackend{{name: "cpu", tol: 1e-3, qtol: 1e-3}}
	if mlxtest.Enabled() {
		out = append(out, testBackend{name: "mlx", open: func(t *testing.T) compute.Backend { return mlxtest.Backend(t) }, tol: 1e-3, qtol: 2e-2})
	}
	return out
}

// load opens dir on b with LoadOptions o.
func (b testBackend) load(t *testing.T, dir string, o LoadOptions) (*Engine, error) {
	if b.open != nil {
		o.Backend = b.open(t)
	}
	return LoadModel(dir, o)
}
