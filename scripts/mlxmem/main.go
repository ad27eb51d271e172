// Command mlxmem measures what a model holds resident on each backend: the process's
// resident memory after loading a checkpoint and after a prefill of -tokens tokens into
// the KV policy's default caches (keys 8-bit, values 4-bit, the first and last two KV
// layers 8/8), on the CPU backend and on MLX (MLXG_MLXC_PATH: an installed
// libmlxc). Each backend runs in a process of its own; the table gives MLX / CPU, and
// the prefill and decode speeds seen on the way (informational: MLX's CPU backend is not
// MLX's target, the GPU is).
//
//	go run ./scripts/mlxmem -model DIR [-tokens 4096] [-bits 4]
//
// -bits converts the checkpoint to MLX affine bits (group 64) first, into a temporary
// directory.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/mlxg/mlxg/internal/procstatus"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/metal" // registers the "mlx" backend that backend.OpenMetal opens
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/backend"
	"github.com/mlxg/mlxg/runner/compute"
	_ "github.com/mlxg/mlxg/runner/cpu" // registers the "cpu" backend
	_ "github.com/mlxg/mlxg/runner/model/all"
)

// sample is one backend's measurement, in bytes.
type sample struct {
	Backend                   string
	Start, Loaded, Prefilled  int64   // VmRSS
	AnonLoaded, AnonPrefilled int64   // RssAnon: what the process allocated itself
	KVBytes                   int64   // what the caches report holding
	Prefill, Decode           float64 // tokens per second (informational)
	MLXActive, MLXCache       int64   // MLX's allocator after the prefill: in use, and freed buffers kept for reuse
}

func main() {
	dir := flag.String("model", "", "checkpoint directory")
	tokens := flag.Int("tokens", 4096, "prompt tokens to prefill")
	one := flag.String("backend", "", "measure one backend in this process (cpu or mlx) and print JSON")
	bits := flag.Int("bits", 0, "convert to MLX affine bits (group 64) first; 0 keeps the checkpoint as it is")
	shape := flag.String("shape", "", "instead of -model: a random checkpoint of this shape (qwen2-0.5b)")
	flag.Parse()
	if *shape == "qwen2-0.5b" && *one == "" {
		tmp, err := os.MkdirTemp("", "mlxmem-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		*dir = filepath.Join(tmp, *shape)
		if err := randmodel.Generate(*dir, randmodel.Qwen2_0_5B(), randmodel.Options{Seed: 1}); err != nil {
			log.Fatal(err)
		}
	}
	if *dir == "" {
		log.Fatal("-model (or -shape qwen2-0.5b) is required")
	}
	if *bits > 0 && *one == "" {
		tmp, err := os.MkdirTemp("", "mlxmem-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		out := filepath.Join(tmp, filepath.Base(*dir)+"-"+strconv.Itoa(*bits)+"bit")
		if _, err := create.Convert(context.Background(), *dir, out, create.Options{Bits: *bits, GroupSize: 64}); err != nil {
			log.Fatal(err)
		}
		*dir = out
	}
	if *one != "" {
		s, err := measure(*dir, *one, *tokens)
		if err != nil {
			log.Fatal(err)
		}
		json.NewEncoder(os.Stdout).Encode(s)
		return
	}
	var rows []sample
	for _, b := range []string{"cpu", "mlx"} {
		cmd := exec.Command(os.Args[0], "-model", *dir, "-tokens", strconv.Itoa(*tokens), "-backend", b)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			log.Fatalf("%s: %v", b, err)
		}
		var s sample
		if err := json.Unmarshal(out, &s); err != nil {
			log.Fatalf("%s: %v", b, err)
		}
		rows = append(rows, s)
	}
	mib := func(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }
	fmt.Printf("%s, %d-token prefill, KV K8/V4 (boundary 8/8)\n\n", filepath.Base(*dir), *tokens)
	fmt.Println("| backend | RSS after load (MiB) | RSS after prefill (MiB) | of which anonymous (MiB) | weights + KV resident (MiB) | KV (MiB) | prefill tok/s | decode tok/s |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, s := range rows {
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %.0f | %.1f |\n", s.Backend, mib(s.Loaded), mib(s.Prefilled), mib(s.AnonPrefilled), mib(s.Prefilled-s.Start), mib(s.KVBytes), s.Prefill, s.Decode)
	}
	if m := rows[1]; m.MLXActive > 0 || m.MLXCache > 0 {
		fmt.Printf("\nMLX's allocator after the prefill: %s MiB in use (weights and scratch), %s MiB of freed buffers cached for reuse (bounded by the plan's overhead in a server)\n", mib(m.MLXActive), mib(m.MLXCache))
	}
	c, m := rows[0], rows[1]
	fmt.Printf("\nMLX / CPU, weights + KV resident: %.2f\n", float64(m.Prefilled-m.Start)/float64(c.Prefilled-c.Start))
}

func measure(dir, which string, tokens int) (sample, error) {
	s := sample{Start: procstatus.Bytes(0, "VmRSS")}
	var be compute.Backend
	switch which {
	case "cpu":
		c, err := backend.Select(backend.Options{Getenv: func(string) string { return "cpu" }, Logger: quiet()})
		if err != nil {
			return s, err
		}
		be = c.Backend
	case "mlx":
		b, err := backend.OpenMetal()
		if err != nil {
			return s, err
		}
		be = b
	default:
		return s, fmt.Errorf("-backend %q: want cpu or mlx", which)
	}
	s.Backend = be.Name()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return s, err
	}
	e, err := runner.LoadModel(dir, runner.LoadOptions{Backend: be, Logger: quiet()})
	if err != nil {
		return s, err
	}
	s.Loaded, s.AnonLoaded = procstatus.Bytes(0, "VmRSS"), procstatus.Bytes(0, "RssAnon")
	shape, err := kvstore.ShapeFromConfig(cfg, e.Model.WeightBytes())
	if err != nil {
		return s, err
	}
	a := kvstore.AffineFormat
	layout, err := kvstore.NewLayout(shape, kvstore.Spec{K: a(8, 64), V: a(4, 32)}, 2, kvstore.Spec{K: a(8, 64), V: a(8, 32)})
	if err != nil {
		return s, err
	}
	caches, err := kvstore.NewCaches(shape, layout)
	if err != nil {
		return s, err
	}
	prompt := make([]int32, tokens)
	for i := range prompt {
		prompt[i] = int32(100 + (i*7919)%20000)
	}
	t0 := time.Now()
	for i := 0; i < tokens; i += 512 {
		if _, err := e.Model.Forward(context.Background(), prompt[i:min(i+512, tokens)], caches, false); err != nil {
			return s, err
		}
	}
	s.Prefill = float64(tokens) / time.Since(t0).Seconds()
	s.Prefilled, s.AnonPrefilled = procstatus.Bytes(0, "VmRSS"), procstatus.Bytes(0, "RssAnon")
	if mb, ok := be.(*metal.Backend); ok {
		if m, err := mb.Lib().Memory(); err == nil {
			s.MLXActive, s.MLXCache = int64(m.Active), int64(m.Cache)
		}
	}
	const steps = 32
	t0 = time.Now()
	for i := range steps {
		if _, err := e.Model.Forward(context.Background(), []int32{int32(200 + i)}, caches, false); err != nil {
			return s, err
		}
	}
	s.Decode = steps / time.Since(t0).Seconds()
	for _, l := range caches {
		if l != nil {
			s.KVBytes += l.Bytes()
		}
	}
	return s, nil
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
