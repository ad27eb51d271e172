//go:build (darwin && arm64) || (linux && (amd64 || arm64) && !nomlx)

package metal

// libmlxc is loaded with purego on Apple Silicon (Metal) and on Linux amd64/arm64 (MLX's
// CPU backend, or CUDA where MLX was built with it). On Linux, purego's fakecgo makes a
// CGO_ENABLED=0 binary dynamically linked against glibc's loader (it must call dlopen);
// a fully static Linux binary without the MLX backend is built with -tags nomlx. That
// is the only cost measured (README, "Backends"): start-up time and the CPU backend's
// speed are unchanged, so the default keeps MLX reachable with MLXG_BACKEND=mlx.

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
