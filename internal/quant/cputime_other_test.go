//go:build !linux

package quant

import "time"

var start = time.Now()

// threadCPU falls back to wall time where RUSAGE_THREAD does not exist.
func threadCPU() float64 { return time.Since(start).Seconds() }
