package quant

import (
	"runtime"
	"syscall"
)

// threadCPU is the process's CPU time in seconds (the benchmark runs on one thread, locked).
func threadCPU() float64 {
	runtime.LockOSThread()
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_THREAD, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
