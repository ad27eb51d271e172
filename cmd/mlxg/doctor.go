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

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/metal"
	"github.com/mlxg/mlxg/runner/backend"
	"github.com/mlxg/mlxg/runner/compute"
	cpubackend "github.com/mlxg/mlxg/runner/cpu"
	_ "github.com/mlxg/mlxg/runner/model/all" // the model checks run every architecture
)

func newDoctorCmd() *cobra.Command {
	var seed uint64
	var reportPath string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this machine and the compute backends: the MLX backend's self-test",
		Long: `doctor reports the OS, chip, memory and memory pressure, which compute backends
can run here and why not, then checks them: every compute operation on random inputs
against plain reference kernels and against the CPU backend, each within its own
tolerance; then a tiny random checkpoint of every supported architecture, float32 and
4-bit, whose logits and greedy tokens must match the CPU backend's. On a Mac this is
the test of the MLX (Metal) backend. One line per check, PASS or FAIL with the
measured error; an architecture without a tiny checkpoint is listed as NOT COVERED.
It exits with a non-zero status when any check fails. Attach the report (--report
writes it to a file as well) to a bug report.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			var file *os.File
			if reportPath != "" {
				f, err := os.Create(reportPath)
				if err != nil {
					return err
				}
				file = f
				out = io.MultiWriter(out, f)
			}
			failed := runDoctor(out, seed)
			if file != nil {
				if err := file.Close(); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "report written to %s\n", reportPath)
			}
			if failed > 0 {
				return fmt.Errorf("doctor: %d check(s) failed", failed)
			}
			return nil
		},
	}
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the random inputs and weights")
	cmd.Flags().StringVar(&reportPath, "report", "", "also write the report to this file (for a bug report)")
	return cmd
}

// underTest is a backend doctor checks against the CPU backend's float path.
type underTest struct {
	name      string // for the Operations section's header
	backend   compute.Backend
	open      backend.Opener // another one of its kind, for a model of its own
	precision backend.Precision
	ops       bool // checked op by op
	models    bool // checked on the tiny models
	streams   bool // the streaming checks too (the CPU reference runs them anyway)
}

// runDoctor prints the report and returns the number of failed checks.
func runDoctor(out io.Writer, seed uint64) int {
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	failed, passed, uncovered := 0, 0, 0
	section := func(name string) { w.Flush(); fmt.Fprintf(out, "\n%s\n", name) }
	row := func(cols ...any) {
		parts := make([]string, len(cols))
		for i, c := range cols {
			parts[i] = fmt.Sprint(c)
		}
		fmt.Fprintf(w, "  %s\n", strings.Join(parts, "\t"))
	}

	fmt.Fprintf(out, "mlxg %s doctor (seed %d)\n", version, seed)
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
	// The reference: the CPU backend's float path. Every other backend, and the CPU
	// backend's own 8-bit input path, is checked against it.
	ref := cpubackend.New(0)
	openRef := func() (compute.Backend, error) { return ref, nil }
	row("cpu", "available: "+ref.Name()+" (the reference)")
	var tested []underTest
	if quant.Int8Kernel() {
		int8All := cpubackend.New(0)
		int8All.UseInt8(true)
		// The 8-bit path is checked op by op. The models run on the backend as serve
		// starts it, 8-bit inputs for a batch's decode rows only, so that a sequence
		// alone takes the float path: 8-bit inputs everywhere move a mixture of
		// experts' router logits enough to pick another expert now and then (the tiny
		// qwen3_next's logits then move by up to a third), beyond any tolerance.
		openServe := func() (compute.Backend, error) {
			b := cpubackend.New(0)
			b.UseInt8Batches(true)
			return b, nil
		}
		serve, _ := openServe()
		tested = append(tested,
			underTest{name: int8All.Name(), backend: int8All, precision: backend.Reduced, ops: true},
			underTest{name: serve.Name(), backend: serve, open: openServe, precision: backend.Float32, models: true})
	} else {
		// No 8-bit path here: the models' comparisons run on one thread against many.
		openOne := func() (compute.Backend, error) { return cpubackend.New(1), nil }
		one, _ := openOne()
		tested = append(tested, underTest{name: one.Name(), backend: one, open: openOne, precision: backend.Float32, models: true})
	}
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
		p := backend.Reduced
		if d, ok := gpu.(interface{ Device() string }); ok && d.Device() == "cpu" {
			p = backend.Float32 // MLX's CPU computes in float32 like the CPU backend
		}
		tested = append(tested, underTest{name: gpu.Name(), backend: gpu, open: backend.OpenMetal, precision: p, ops: true, models: true, streams: true})
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
		CPU:    func(n int) compute.Backend { return cpubackend.New(n) }, // Select sets its 8-bit inputs
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		row("selected", "FAIL: "+strings.ReplaceAll(err.Error(), "\n", "\n  \t"))
		failed++
	} else {
		row("selected", fmt.Sprintf("%s (%s; %s=cpu, metal or mlx forces one)", choice.Backend.Name(), choice.Reason, backend.Env))
		backend.Release(choice.Backend)
	}

	// One line per check: status, check, what it is compared with, the error and its
	// tolerance (or why it failed or was not covered), a note. sub heads the lines of
	// one backend.
	sub := func(title string) { w.Flush(); fmt.Fprintf(out, "  %s\n", title) }
	report := func(res ...backend.Result) {
		for _, r := range res {
			detail := fmt.Sprintf("%.2e (tolerance %.0e)", r.RelErr, r.Tol)
			switch {
			case r.Uncovered != "":
				detail = r.Uncovered
				uncovered++
			case r.Err != nil:
				detail = r.Err.Error()
				failed++
			case !r.OK():
				failed++
			default:
				passed++
			}
			against := ""
			if r.Against != "" {
				against = "vs " + r.Against
			}
			row(" ", r.Status(), r.Check, against, detail, r.Note)
		}
	}
	ops := func(b compute.Backend, p backend.Precision) {
		res, err := backend.CheckOps(b, ref, p, seed)
		if err != nil {
			row(" ", "FAIL", "setting up the checks: "+err.Error())
			failed++
		}
		report(res...)
	}

	section("Operations (random inputs; error = max|got-want| / max|want|, tolerance per operation)")
	sub(ref.Name() + ", the reference, against plain Go kernels:")
	ops(ref, backend.Float32)
	for _, t := range tested {
		if t.ops {
			sub(fmt.Sprintf("%s (%s):", t.name, t.precision))
			ops(t.backend, t.precision)
		}
	}

	section("Models (a tiny random checkpoint of every supported architecture, float32 and 4-bit; error of the logits)")
	dir, err := os.MkdirTemp("", "mlxg-doctor-")
	if err != nil {
		row("FAIL", "a folder for the models: "+err.Error())
		failed++
	} else {
		defer os.RemoveAll(dir)
		models := backend.TinyModels(dir, seed)
		sub(ref.Name() + ", the reference:")
		for _, m := range models {
			report(backend.CheckModel(m, openRef, nil, backend.Float32)...)
			if streamChecked(m) {
				report(backend.CheckStreaming(m, openRef, backend.Float32))
			}
		}
		for _, t := range tested {
			if !t.models {
				continue
			}
			sub(fmt.Sprintf("%s (%s), fed the reference's greedy tokens:", t.name, t.precision))
			for _, m := range models {
				if m.Uncovered != "" {
					continue // said once, above
				}
				report(backend.CheckModel(m, t.open, openRef, t.precision)...)
				if t.streams && streamChecked(m) {
					report(backend.CheckStreaming(m, t.open, t.precision))
				}
			}
		}

		section("Images (the tiny checkpoints with a vision tower, two images in the prompt; error of the image features and the logits)")
		vms := backend.TinyVisionModels(dir, seed)
		sub(ref.Name() + ", the reference:")
		for _, m := range vms {
			report(backend.CheckVisionModel(m, openRef, nil, backend.Float32)...)
		}
		for _, t := range tested {
			if t.models {
				sub(fmt.Sprintf("%s (%s), fed the reference's greedy tokens:", t.name, t.precision))
				for _, m := range vms {
					report(backend.CheckVisionModel(m, t.open, openRef, t.precision)...)
				}
			}
		}
	}
	w.Flush()
	fmt.Fprintf(out, "\nSummary: %d passed, %d failed, %d not covered.\n", passed, failed, uncovered)
	if failed == 0 {
		fmt.Fprintln(out, "All checks passed.")
	} else {
		fmt.Fprintf(out, "%d check(s) FAILED. Attach this report to a bug report.\n", failed)
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

// streamChecked reports whether the tiny model m gets the streamed-vs-mapped check: its
// 4-bit form, and gpt-oss with mxfp4 experts (mlx-community's MXFP4-Q8), whose experts
// stream in their own two-part layout.
func streamChecked(m backend.TinyModel) bool {
	return m.Format.Name == "4-bit" || m.Format.Name == "mxfp4-q8"
}
