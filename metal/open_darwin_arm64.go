package metal

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
