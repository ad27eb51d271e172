package backend

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/metal"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	_ "github.com/mlxg/mlxg/runner/model/all"
)

// fakeGPU stands in for an available Metal backend.
type fakeGPU struct{ compute.Backend }

func (fakeGPU) Name() string { return "metal (fake)" }

func selectWith(t *testing.T, env string, metalErr error) (Choice, string, error) {
	t.Helper()
	var logs bytes.Buffer
	c, err := Select(Options{
		Getenv: func(k string) string {
			if k == Env {
				return env
			}
			return ""
		},
		GOOS:    "darwin",
		Threads: 2,
		Metal: func() (compute.Backend, error) {
			if metalErr != nil {
				return nil, metalErr
			}
			return fakeGPU{cpu.New(1)}, nil
		},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	return c, logs.String(), err
}

func TestSelect(t *testing.T) {
	unavailable := &metal.UnavailableError{Reason: metal.ErrUnsupportedPlatform,
		Tried: []metal.Attempt{{Path: "/opt/homebrew/lib/libmlxc.dylib", Err: errors.New("not found")}}}

	c, logs, err := selectWith(t, "", nil)
	if err != nil || c.Kind != "metal" || !strings.Contains(logs, `backend="metal (fake)"`) || !strings.Contains(logs, "libmlxc loaded") {
		t.Errorf("automatic with Metal: %+v %v\n%s", c, err, logs)
	}
	c, logs, err = selectWith(t, "", unavailable)
	if err != nil || c.Kind != "cpu" || !strings.Contains(logs, "Metal is only available on macOS on Apple Silicon") ||
		!strings.Contains(logs, "/opt/homebrew/lib/libmlxc.dylib: not found") || strings.Count(logs, "\n") != 1 {
		t.Errorf("automatic without Metal: %+v %v\n%s", c, err, logs)
	}
	c, logs, err = selectWith(t, "cpu", nil)
	if err != nil || c.Kind != "cpu" || c.Backend.Name() != cpuName(2) || !strings.Contains(logs, "MLXG_BACKEND=cpu") {
		t.Errorf("forced cpu: %+v %v\n%s", c, err, logs)
	}
	c, _, err = selectWith(t, "METAL", nil)
	if err != nil || c.Kind != "metal" {
		t.Errorf("forced metal: %+v %v", c, err)
	}
	_, _, err = selectWith(t, "metal", unavailable)
	if err == nil || !strings.Contains(err.Error(), "MLXG_BACKEND=metal, but the Metal backend cannot run") || !errors.Is(err, metal.ErrUnsupportedPlatform) {
		t.Errorf("forced metal without it: %v", err)
	}
	_, _, err = selectWith(t, "cuda", nil)
	if err == nil || !strings.Contains(err.Error(), `"cuda": want cpu, metal or mlx`) {
		t.Errorf("unknown backend: %v", err)
	}
}

func TestCPUPassesEveryOpCheck(t *testing.T) {
	b := cpu.New(2)
	res, err := CheckOps(b, b, TolCPU, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) < 30 {
		t.Fatalf("only %d checks ran", len(res))
	}
	for _, r := range res {
		if r.Against != "reference" {
			t.Errorf("%s compared with %s: the reference backend is not compared with itself", r.Check, r.Against)
		}
		if !r.OK() {
			t.Errorf("%s on %s: relative error %.3g (tolerance %.0e), %v", r.Check, r.Backend, r.RelErr, r.Tol, r.Err)
		}
	}
}

// skewed is the CPU backend with a wrong SwiGLU, as a broken backend would have.
type skewed struct{ *cpu.Backend }

func (s skewed) Name() string { return "skewed" }
func (s skewed) NewContext() compute.Context {
	return skewedCtx{s.Backend.NewContext()}
}

type skewedCtx struct{ compute.Context }

func (c skewedCtx) SwiGLU(g, u compute.Tensor) compute.Tensor { return c.Mul(g, u) }

// Unwrap lets the optional operations through to the CPU context.
func (c skewedCtx) Unwrap() compute.Context { return c.Context }

func TestChecksCatchAWrongKernel(t *testing.T) {
	ref := cpu.New(2)
	res, err := CheckOps(skewed{cpu.New(2)}, ref, TolGPU, 2)
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]bool{}
	for _, r := range res {
		if !r.OK() {
			failed[r.Check+" vs "+r.Against] = true
		}
	}
	if !failed["SwiGLU vs reference"] || !failed["SwiGLU vs "+ref.Name()] || len(failed) != 2 {
		t.Fatalf("failed checks %v, want exactly SwiGLU against the reference and the CPU", failed)
	}
}

func TestCheckModelOnCPU(t *testing.T) {
	dir := t.TempDir()
	if err := TinyModel(dir, 3); err != nil {
		t.Fatal(err)
	}
	openCPU := func() (compute.Backend, error) { return cpu.New(2), nil }
	res := CheckModel(dir, openCPU, nil, TolCPU)
	if len(res) != 1 || !res[0].OK() {
		t.Fatalf("%+v", res)
	}
	// Against a reference backend, the logits are compared too.
	res = CheckModel(dir, openCPU, openCPU, TolCPU)
	if len(res) != 2 || !res[0].OK() || !res[1].OK() || res[1].Against != "cpu (2 threads)" {
		t.Fatalf("%+v", res)
	}
	res = CheckModel(dir, func() (compute.Backend, error) { return skewed{cpu.New(2)}, nil }, openCPU, TolCPU)
	if len(res) != 2 || res[1].OK() {
		t.Fatalf("a wrong SwiGLU passed the logits check: %+v", res)
	}
}

// The chooser opens the backends by the names their packages register.
func TestDriverNames(t *testing.T) {
	if cpuDriver != cpu.DriverName || mlxDriver != metal.DriverName {
		t.Fatalf("the chooser opens %q and %q; runner/cpu registers %q, metal %q", cpuDriver, mlxDriver, cpu.DriverName, metal.DriverName)
	}
	for _, name := range []string{cpuDriver, mlxDriver} {
		if _, ok := compute.Lookup(name); !ok {
			t.Errorf("no backend registered as %q (registered: %v)", name, compute.Drivers())
		}
	}
	// Without a CPU stand-in, Select opens the registered CPU backend.
	c, err := Select(Options{Getenv: func(k string) string {
		if k == Env {
			return "cpu"
		}
		return ""
	}, Threads: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil || c.Backend.Name() != cpuName(3) {
		t.Errorf("forced cpu from the registry: %+v %v", c, err)
	}
}

// cpuName is the name of the CPU backend Select starts by default: 8-bit inputs in
// batches where the machine has the integer kernels.
func cpuName(threads int) string {
	if quant.Int8Kernel() {
		return fmt.Sprintf("cpu (%d threads, 8-bit inputs in batches)", threads)
	}
	return fmt.Sprintf("cpu (%d threads)", threads)
}

// int8Recorder is a CPU stand-in that records UseInt8 and UseInt8Batches.
type int8Recorder struct {
	compute.Backend
	mode *string
}

func (r int8Recorder) UseInt8(on bool) {
	if on {
		*r.mode = "all"
	}
}

func (r int8Recorder) UseInt8Batches(on bool) {
	if on {
		*r.mode = "batches"
	}
}

func TestInt8Setting(t *testing.T) {
	for _, tc := range []struct {
		backend, int8 string
		want          string
	}{{"cpu", "1", "all"}, {"cpu", "", "batches"}, {"cpu", "batch", "batches"}, {"cpu", "0", "off"}, {"", "true", "all"}, {"", "false", "off"}} {
		mode := "off"
		_, err := Select(Options{
			Getenv: func(k string) string {
				return map[string]string{Env: tc.backend, Int8Env: tc.int8}[k]
			},
			GOOS:   "linux",
			CPU:    func(n int) compute.Backend { return int8Recorder{cpu.New(n), &mode} },
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil || mode != tc.want {
			t.Errorf("%s=%q %s=%q: 8-bit inputs %s, want %s (%v)", Env, tc.backend, Int8Env, tc.int8, mode, tc.want, err)
		}
	}
	if _, err := Select(Options{Getenv: func(k string) string { return map[string]string{Int8Env: "yes"}[k] }}); err == nil ||
		!strings.Contains(err.Error(), "want 1 (every decode product), 0 (none: float) or batch") {
		t.Errorf("a bad %s: %v", Int8Env, err)
	}
}

func TestForModel(t *testing.T) {
	c, _, err := selectWith(t, "cpu", nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := c.ForModel(); err != nil || b != c.Backend || Release(b) != nil {
		t.Errorf("the CPU backend is not shared: %v %v", b, err)
	}
	c, _, err = selectWith(t, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b1, err1 := c.ForModel()
	b2, err2 := c.ForModel()
	if err1 != nil || err2 != nil || b1 == b2 || b1 == c.Backend || b1.Name() != "metal (fake)" {
		t.Errorf("Metal backends per model: %v %v, %v %v", b1, err1, b2, err2)
	}
}
