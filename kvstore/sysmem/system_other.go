//go:build !linux && !darwin

package sysmem

import (
	"fmt"
	"runtime"
)

type unsupported struct{}

func (unsupported) Read() (Info, error) {
	return Info{}, fmt.Errorf("reading memory is not supported on %s: set the KV cache with --kv-bits and --max-kv-size", runtime.GOOS)
}

func systemSensor() Sensor { return unsupported{} }
