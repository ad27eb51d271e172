package metal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// EnvPath names the variable that points Open at libmlxc: the library file itself, or
// a directory holding libmlxc.dylib (libmlxc.so on Linux). When set, it is the only
// place looked at.
const EnvPath = "MLXG_MLXC_PATH"

// LibName is the file name of mlx-c's shared library on this OS.
var LibName = libName(runtime.GOOS)

func libName(goos string) string {
	if goos == "darwin" {
		return "libmlxc.dylib"
	}
	return "libmlxc.so"
}

// ErrUnsupportedPlatform is the reason Open fails where this binary does not load
// libmlxc: anything but macOS on Apple Silicon and Linux on amd64/arm64.
var ErrUnsupportedPlatform = errors.New("Metal is only available on macOS on Apple Silicon (and MLX only there and on Linux amd64/arm64)")

var errNotFound = errors.New("not found")

// Attempt is one place Open looked for libmlxc and why it was not used.
type Attempt struct {
	Path string
	Err  error
}

// UnavailableError says why the Metal backend cannot run here.
type UnavailableError struct {
	Reason error     // ErrUnsupportedPlatform, or what went wrong with the library
	Tried  []Attempt // the libraries looked for, in order
}

func (e *UnavailableError) Error() string {
	var b strings.Builder
	b.WriteString("Metal backend unavailable: ")
	b.WriteString(e.Reason.Error())
	for _, a := range e.Tried {
		fmt.Fprintf(&b, "\n  %s: %v", a.Path, a.Err)
	}
	if !errors.Is(e.Reason, ErrUnsupportedPlatform) {
		if runtime.GOOS == "darwin" {
			fmt.Fprintf(&b, "\n  install mlx-c with `brew install mlx-c`, or set %s to the libmlxc.dylib to use", EnvPath)
		} else {
			fmt.Fprintf(&b, "\n  install MLX and mlx-c (docs/backends.md, \"MLX on Linux\"), then set %s to the directory holding libmlxc.so", EnvPath)
		}
	}
	return b.String()
}

func (e *UnavailableError) Unwrap() error { return e.Reason }

// Candidates returns where Open looks for libmlxc, in order: $MLXG_MLXC_PATH alone when
// set; else next to the executable, then the system's lib directories (on macOS
// Homebrew's: Apple Silicon's /opt/homebrew/lib, then /usr/local/lib; on Linux
// /usr/local/lib, then /usr/lib).
func Candidates(getenv func(string) string, executable string) []string {
	return candidates(runtime.GOOS, getenv, executable)
}

func candidates(goos string, getenv func(string) string, executable string) []string {
	name := libName(goos)
	if p := getenv(EnvPath); p != "" {
		if filepath.Ext(p) != ".dylib" && filepath.Ext(p) != ".so" {
			p = filepath.Join(p, name)
		}
		return []string{p}
	}
	var out []string
	if executable != "" {
		out = append(out, filepath.Join(filepath.Dir(executable), name))
	}
	if goos == "darwin" {
		return append(out, "/opt/homebrew/lib/"+name, "/usr/local/lib/"+name)
	}
	return append(out, "/usr/local/lib/"+name, "/usr/lib/"+name)
}

// openFirst loads the first candidate that exists and binds; it records why each
// earlier one was passed over.
func openFirst(d dynlib, candidates []string) (*Lib, error) {
	var tried []Attempt
	for _, p := range candidates {
		if _, err := os.Stat(p); err != nil {
			tried = append(tried, Attempt{p, errNotFound})
			continue
		}
		l, err := load(d, p)
		if err == nil {
			return l, nil
		}
		tried = append(tried, Attempt{p, err})
	}
	reason := errors.New("libmlxc not found")
	for _, a := range tried {
		if !errors.Is(a.Err, errNotFound) {
			reason = errors.New("libmlxc could not be loaded")
		}
	}
	return nil, &UnavailableError{Reason: reason, Tried: tried}
}

var opened struct {
	once sync.Once
	lib  *Lib
	err  error
}

// Open loads libmlxc once per process and returns it, or an *UnavailableError saying
// why the Metal backend cannot run here.
func Open() (*Lib, error) {
	opened.once.Do(func() { opened.lib, opened.err = open() })
	return opened.lib, opened.err
}
