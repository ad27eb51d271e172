//go:build amd64 || arm64

package crew

// pause tells the core that this thread is spinning (x86 PAUSE, arm64 YIELD), so that
// a hardware thread sharing the core, or the hypervisor, gets its resources meanwhile.
func pause()
