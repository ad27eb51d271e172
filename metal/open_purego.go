//go:build (darwin && arm64) || (linux && (amd64 || arm64) && !nomlx)

package metal

// libmlxc is loaded with purego on Apple Silicon (Metal) and on Linux amd64/arm64 (MLX's
// CPU backend, or CUDA where MLX was built with it). On Linux, purego's fakecgo makes a
// CGO_ENABLED=0 binary dynamically linked against glibc's loader (it must call dlopen):
// such a binary does not run on musl or in an empty container, and every start pays the
// dynamic loader's work, tens of milliseconds; the CPU backend's kernels do not go
// through it. The default build keeps MLX one environment variable away
// (MLXG_BACKEND=mlx), since the same binary then serves both; -tags nomlx builds a static
// binary without it, for the places a dynamic one cannot run.

import (
	"os"

	"github.com/ebitengine/purego"
)

var system = dynlib{
	open: func(path string) (uintptr, error) {
		return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	},
	sym:      purego.Dlsym,
	register: func(fptr any, addr uintptr) { purego.RegisterFunc(fptr, addr) },
	callback: purego.NewCallback,
}

func open() (*Lib, error) {
	exe, _ := os.Executable()
	return openFirst(system, Candidates(os.Getenv, exe))
}
