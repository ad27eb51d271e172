// Package backend chooses the compute backend at start-up: Metal (MLX through libmlxc,
// package metal) on macOS on Apple Silicon when the library loads and reports a GPU,
// otherwise the pure-Go CPU backend, and says why in one log line. MLXG_BACKEND=cpu,
// metal or mlx forces one: metal needs Apple's GPU; mlx takes MLX on whatever device it
// has (on Linux a CUDA GPU or MLX's CPU backend, which is never chosen automatically).
// Forcing one fails, with the reason, where it cannot run.
//
// It also holds the checks `mlxg doctor` runs on every backend (check.go). Backends are
// opened by the names they register with runner/compute ("cpu" by runner/cpu, "mlx" by
// metal), never imported here: the main package decides which are built in, and this
// package stays below them, so that code choosing or checking a backend does not link
// libmlxc's bindings into every program that uses it.
package backend

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/mlxg/mlxg/runner/compute"
)

// The registered names of the two backends the chooser knows (runner/cpu.DriverName
// and metal.DriverName).
const (
	cpuDriver = "cpu"
	mlxDriver = "mlx"
)

// Env names the variable that forces a backend.
const Env = "MLXG_BACKEND"

// Int8Env names the variable that sets where the CPU backend's decode products take 8-bit
// inputs: unset (or "batch"), the decode rows of batched passes only
// (cpu.Backend.UseInt8Batches), the default; 1, every decode product (cpu.Backend.UseInt8);
// 0, none (the float path, the reference).
const Int8Env = "MLXG_CPU_INT8"

// The values of Int8Env, as int8Setting reads them.
const (
	int8Off = iota
	int8Batches
	int8All
)

// Choice is the backend chosen and why.
type Choice struct {
	Backend compute.Backend
	Kind    string // "metal", "mlx" or "cpu"
	Reason  string // for the log: why this one

	open func() (compute.Backend, error) // another Metal backend, for ForModel
}

// ForModel returns the backend to load one more model on. The CPU backend is shared
// by every model. Metal gets a Backend of its own per model, because its weights wrap
// that model's mmapped checkpoint and are held until the Backend is closed: call
// Release on it before closing the model.
func (c Choice) ForModel() (compute.Backend, error) {
	if c.open == nil {
		return c.Backend, nil
	}
	return c.open()
}

// Release closes a backend ForModel made, when it has anything to close (the shared
// CPU backend has not).
func Release(b compute.Backend) error {
	if c, ok := b.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

// Options are what Select reads; the zero value means the real environment.
type Options struct {
	Getenv  func(string) string               // os.Getenv when nil
	GOOS    string                            // runtime.GOOS when empty
	Threads int                               // CPU backend goroutines; <= 0 means all cores
	Metal   func() (compute.Backend, error)   // opens the MLX backend; OpenMetal when nil
	CPU     func(threads int) compute.Backend // the registered "cpu" backend when nil
	Logger  *slog.Logger                      // slog.Default() when nil
}

// OpenMetal starts the registered MLX backend ("mlx", package metal): it loads libmlxc
// and runs on the library's best device (the Metal GPU on a Mac; see metal.NewBackend).
func OpenMetal() (compute.Backend, error) {
	return compute.Open(mlxDriver, compute.OpenOptions{})
}

// openCPU starts the registered CPU backend.
func openCPU(threads int) (compute.Backend, error) {
	return compute.Open(cpuDriver, compute.OpenOptions{Threads: threads})
}

// Select picks the backend and logs the choice with its reason.
func Select(o Options) (Choice, error) {
	getenv, openMetal, newCPU, log := o.Getenv, o.Metal, o.CPU, o.Logger
	if getenv == nil {
		getenv = os.Getenv
	}
	if openMetal == nil {
		openMetal = OpenMetal
	}
	cpuFrom := openCPU
	if newCPU != nil {
		cpuFrom = func(n int) (compute.Backend, error) { return newCPU(n), nil }
	}
	int8, err := int8Setting(getenv)
	if err != nil {
		return Choice{}, err
	}
	startCPU := func() (compute.Backend, error) {
		b, err := cpuFrom(o.Threads)
		if err != nil {
			return nil, err
		}
		switch int8 {
		case int8All:
			if c, ok := b.(interface{ UseInt8(bool) }); ok {
				c.UseInt8(true)
			}
		case int8Batches:
			if c, ok := b.(interface{ UseInt8Batches(bool) }); ok {
				c.UseInt8Batches(true)
			}
		}
		return b, nil
	}
	if log == nil {
		log = slog.Default()
	}
	goos := o.GOOS
	if goos == "" {
		goos = runtime.GOOS
	}
	forced := strings.ToLower(strings.TrimSpace(getenv(Env)))
	var c Choice
	switch forced {
	case "cpu":
		b, err := startCPU()
		if err != nil {
			return Choice{}, fmt.Errorf("%s=cpu: %w", Env, err)
		}
		c = Choice{Backend: b, Kind: "cpu", Reason: Env + "=cpu"}
	case "metal", "mlx":
		b, err := openMetal()
		if err != nil {
			return Choice{}, fmt.Errorf("%s=%s, but the %s backend cannot run: %w", Env, forced, backendTitle(forced), err)
		}
		if d := device(b); forced == "metal" && d != "metal" {
			Release(b)
			return Choice{}, fmt.Errorf("%s=metal, but MLX runs on %s here, not on Apple's GPU (%s=mlx takes it)", Env, d, Env)
		}
		c = Choice{Backend: b, Kind: forced, Reason: Env + "=" + forced, open: openMetal}
	case "":
		reason := "the default on " + goos + " (" + Env + "=mlx runs MLX)"
		if goos == "darwin" {
			b, err := openMetal()
			if err == nil {
				c = Choice{Backend: b, Kind: "metal", Reason: "libmlxc loaded and MLX reports a Metal GPU", open: openMetal}
				break
			}
			reason = oneLine(err)
		}
		b, err := startCPU()
		if err != nil {
			return Choice{}, err
		}
		c = Choice{Backend: b, Kind: "cpu", Reason: reason}
	default:
		return Choice{}, fmt.Errorf("%s=%q: want cpu, metal or mlx (or unset to choose automatically)", Env, getenv(Env))
	}
	log.Info("compute backend", "backend", c.Backend.Name(), "why", c.Reason)
	return c, nil
}

// int8Setting reads Int8Env: unset or "batch" is 8-bit inputs in batched passes only, a
// true value everywhere, a false one nowhere.
func int8Setting(getenv func(string) string) (int, error) {
	v := strings.TrimSpace(getenv(Int8Env))
	if v == "" || strings.EqualFold(v, "batch") {
		return int8Batches, nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want 1 (every decode product), 0 (none: float) or batch (batched decode rows, the default)", Int8Env, v)
	}
	if on {
		return int8All, nil
	}
	return int8Off, nil
}

// device is the MLX device b runs on ("metal", "cuda", "cpu"); a backend that does not
// say (a test's stand-in) counts as Metal.
func device(b compute.Backend) string {
	if d, ok := b.(interface{ Device() string }); ok {
		return d.Device()
	}
	return "metal"
}

func backendTitle(kind string) string {
	if kind == "metal" {
		return "Metal"
	}
	return "MLX"
}

// oneLine folds a multi-line error (the libraries looked for) into one log value.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", ";")), " ")
}
