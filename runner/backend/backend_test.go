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
