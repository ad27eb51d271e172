package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/metal"
	"github.com/mlxg/mlxg/runner/backend"
	"github.com/mlxg/mlxg/runner/compute"
	cpubackend "github.com/mlxg/mlxg/runner/cpu"
	_ "github.com/mlxg/mlxg/runner/model/all" // the tiny model check loads a qwen3
)

func newDoctorCmd() *cobra.Command {
	var seed uint64
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this machine: system, memory, compute backends and their results",
		Long: `doctor reports the OS, chip, memory and memory pressure, which compute backends
can run here and why not, then runs every compute operation on every available
backend with random inputs and compares it with plain reference kernels (and a GPU
backend with the CPU backend), and finally runs a tiny randomly generated model.
It exits with a non-zero status when any check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			failed := runDoctor(cmd.OutOrStdout(), seed)
			if failed > 0 {
				return fmt.Errorf("doctor: %d check(s) failed", failed)
			}
			return nil
		},
	}
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the random inputs")
	return cmd
}

// runDoctor prints the report and returns the number of failed checks.
func runDoctor(out io.Writer, seed uint64) int {
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	failed := 0
	section := func(name string) { w.Flush(); fmt.Fprintf(out, "\n%s\n", name) }
	row := func(cols ...any) {
		parts := make([]string, len(cols))
		for i, c := range cols {
			parts[i] = fmt.Sprint(c)
		}
		fmt.Fprintf(w, "  %s\n", strings.Join(parts, "\t"))
	}

	fmt.Fprintf(out, "mlxg %s doctor\n", version)
	section("System")
	row("OS", osDescription())
	chip := chipName()
	row("Chip", fmt.Sprintf("%s, %d logical cores", chip, runtime.NumCPU()))
	if mem, err := sysmem.System().Read(); err == nil {
		row("Memory", fmt.Sprintf("%s total, %s available, swap %s used of %s",
			humanize.IBytes(mem.Total), humanize.IBytes(mem.Available), humanize.IBytes(mem.SwapUsed), humanize.IBytes(mem.SwapTotal)))
		row("Pressure", fmt.Sprintf("%s (read from %s)", mem.Pressure, mem.Source))
	} else {
		row("Memory", "FAIL: "+err.Error())
		failed++
	}

	section("Backends")
	ref := cpubackend.New(0)
	backends := []compute.Backend{ref}
	openCPU := func() (compute.Backend, error) { return cpubackend.New(0), nil }
	openers := []backend.Opener{openCPU}
	row("cpu", "available: "+ref.Name())
	// MLX: Metal on a Mac; on Linux MLX's CPU (or CUDA) backend where libmlxc is found,
	// chosen only by MLXG_BACKEND=mlx.
	mlxRow := "metal"
	if runtime.GOOS != "darwin" {
		mlxRow = "mlx"
	}
	gpu, gpuErr := backend.OpenMetal()
	if gpuErr != nil {
		row(mlxRow, strings.ReplaceAll(gpuErr.Error(), "\n", "\n  \t"))
	} else {
		defer gpu.(interface{ Close() error }).Close()
		backends = append(backends, gpu)
		openers = append(openers, backend.OpenMetal)
		desc := "available: " + gpu.Name()
		if mb, ok := gpu.(*metal.Backend); ok {
			lib := mb.Lib()
			desc += fmt.Sprintf(", libmlxc %s (mlx-c %s API)", lib.Path, lib.ABI)
			// Several machines (serve --hostfile, worker) need MLX's distributed layer.
			if lib.DistributedAvailable() {
				desc += "; distributed layer bound (several machines: serve --hostfile, worker)"
			} else {
				desc += "; no distributed layer (several machines need mlx-c 0.6 or newer)"
			}
		}
		row(mlxRow, desc)
	}
	// What `mlxg serve` and `mlxg run` would choose, by the same rule.
	choice, err := backend.Select(backend.Options{
		// A backend of its own: Select releases one it turns down (MLXG_BACKEND=metal
		// where MLX runs on the CPU), and the checks below still need theirs.
		Metal: func() (compute.Backend, error) {
			if gpuErr != nil {
				return nil, gpuErr
			}
			return backend.OpenMetal()
		},
		CPU:    func(int) compute.Backend { return ref },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		row("selected", "FAIL: "+strings.ReplaceAll(err.Error(), "\n", "\n  \t"))
		failed++
	} else {
		row("selected", fmt.Sprintf("%s (%s; %s=cpu, metal or mlx forces one)", choice.Backend.Name(), choice.Reason, backend.Env))
		if choice.Backend != ref {
			backend.Release(choice.Backend)
		}
	}

	report := func(res []backend.Result) {
		for _, r := range res {
			status := "ok"
			detail := fmt.Sprintf("%.2e (tolerance %.0e)", r.RelErr, r.Tol)
			switch {
			case r.Err != nil:
				status, detail = "FAIL", r.Err.Error()
				failed++
			case !r.OK():
				status = "FAIL"
				failed++
			}
			row(status, r.Backend, r.Check, "vs "+r.Against, detail)
		}
	}
	section("Operations (random inputs; error = max|got-want| / max|want|)")
	for _, b := range backends {
		tol := backend.TolGPU
		if d, ok := b.(interface{ Device() string }); b == ref || ok && d.Device() == "cpu" {
			tol = backend.TolCPU // MLX's CPU computes in float32 like the CPU backend
		}
		res, err := backend.CheckOps(b, ref, tol, seed)
		if err != nil {
			row("FAIL", b.Name(), "setting up the checks: "+err.Error())
			failed++
			continue
		}
		report(res)
	}

	section("Tiny model (random qwen3, 2 layers: prefill and decode)")
	dir, err := os.MkdirTemp("", "mlxg-doctor-")
	if err == nil {
		defer os.RemoveAll(dir)
		err = backend.TinyModel(dir, seed)
	}
	if err != nil {
		row("FAIL", "generating the model: "+err.Error())
		failed++
	} else {
		report(backend.CheckModel(dir, openCPU, nil, backend.TolCPU))
		for _, open := range openers[1:] {
			report(backend.CheckModel(dir, open, openCPU, backend.TolGPU))
		}
	}
	w.Flush()
	if failed == 0 {
		fmt.Fprintln(out, "\nAll checks passed.")
	} else {
		fmt.Fprintf(out, "\n%d check(s) FAILED.\n", failed)
	}
	return failed
}

// osDescription is GOOS/GOARCH with the release: sw_vers on macOS, /etc/os-release
// and the kernel release on Linux.
func osDescription() string {
	d := runtime.GOOS + "/" + runtime.GOARCH
	switch runtime.GOOS {
	case "darwin":
		if out, err := exec.Command("/usr/bin/sw_vers", "-productVersion").Output(); err == nil {
			d += " (macOS " + strings.TrimSpace(string(out)) + ")"
		}
	case "linux":
		if data, err := os.ReadFile("/etc/os-release"); err == nil {
			for _, line := range strings.Split(string(data), "\n") {
				if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
					d += " (" + strings.Trim(v, `"`) + ")"
				}
			}
		}
		if k, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
			d += ", kernel " + strings.TrimSpace(string(k))
		}
	}
	return d
}

// chipName is the processor's marketing name: sysctl machdep.cpu.brand_string on
// macOS ("Apple M3 Max"), /proc/cpuinfo's model name on Linux.
func chipName() string {
	if runtime.GOOS == "darwin" {
		if out, err := exec.Command("/usr/sbin/sysctl", "-n", "machdep.cpu.brand_string").Output(); err == nil {
			if s := strings.TrimSpace(string(out)); s != "" {
				return s
			}
		}
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return "unknown"
}
