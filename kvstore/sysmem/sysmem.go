// Package sysmem reads how much memory the machine has, how much is available, and
// the memory pressure level, behind one interface (Sensor) so that the KV-cache policy
// can be tested with faked readings.
//
// Supported: darwin (sysctl hw.memsize and kern.memorystatus_vm_pressure_level, page
// counts from host_statistics64 in libSystem through purego, swap from vm.swapusage;
// builds with CGO_ENABLED=0) and linux (/proc/meminfo MemAvailable and swap, the
// process's cgroup v2 or v1 memory limit when one applies, PSI from /proc/pressure/memory).
// Other systems get a Sensor whose Read returns an error. One Read costs tens of
// microseconds, so a caller may read it per request.
//
// The level comes from the available memory first (level.go); the OS's own signal (the
// darwin kernel's level, linux's sustained stalls) only adds to it where memory is not
// plentiful. MLXG_MEMORY_SIGNAL=off makes System ignore that signal.
package sysmem

import (
	"fmt"
	"os"
	"strings"

	"github.com/dustin/go-humanize"
)

// Pressure is the system's memory pressure level.
type Pressure int

// Pressure levels, in order of severity.
const (
	Normal Pressure = iota
	Warn
	Critical
)

func (p Pressure) String() string {
	switch p {
	case Normal:
		return "normal"
	case Warn:
		return "warn"
	case Critical:
		return "critical"
	}
	return fmt.Sprintf("pressure(%d)", int(p))
}

// ParsePressure reads "normal", "warn" or "critical".
func ParsePressure(s string) (Pressure, error) {
	for _, p := range []Pressure{Normal, Warn, Critical} {
		if s == p.String() {
			return p, nil
		}
	}
	return Normal, fmt.Errorf("unknown memory pressure %q: want normal, warn or critical", s)
}

// Info is one reading. Byte counts are of the whole machine, or of the cgroup limit
// the process runs under when that is smaller.
type Info struct {
	Total uint64 // physical memory (or the cgroup limit)
	// Limited: Total is a memory cgroup's limit, below the machine's memory (Linux).
	Limited    bool
	Available  uint64 // memory a new allocation can take without swapping: free + reclaimable
	Wired      uint64 // darwin only: pages the kernel cannot page out
	Compressed uint64 // darwin only: memory held by the compressor
	SwapTotal  uint64
	SwapUsed   uint64
	Pressure   Pressure // the level: Signal weighed against Available (level.go)
	// Signal is the operating system's own view before it is weighed against Available:
	// darwin's kern.memorystatus_vm_pressure_level; on linux warn for sustained memory
	// stalls or a nearly full swap, critical for sustained stalls of every task.
	Signal Pressure
	Source string // what was read, for logs: "darwin sysctl+host_statistics64", "linux /proc/meminfo+cgroup v2+psi", "fixed"
}

// Freed is the reading as it would be with n more bytes available, the memory of models
// the caller would unload first: the level is weighed again, so pressure their own
// memory causes does not count against what replaces them. It never raises the level.
func (i Info) Freed(n uint64) Info {
	if n == 0 {
		return i
	}
	i.Available += n
	if i.Total > 0 {
		i.Available = min(i.Available, i.Total)
	}
	i.Pressure = min(i.Pressure, level(i.Signal, i.Available, i.Total))
	return i
}

func (i Info) String() string {
	return fmt.Sprintf("total %s, available %s, swap used %s of %s, pressure %s (%s)",
		humanize.IBytes(i.Total), humanize.IBytes(i.Available),
		humanize.IBytes(i.SwapUsed), humanize.IBytes(i.SwapTotal), i.Pressure, i.Source)
}

// Sensor reads the machine's memory state.
type Sensor interface {
	Read() (Info, error)
}

// Fixed is a Sensor that always returns the same reading: for tests, and for
// `mlxg fit`'s "what if" rows.
type Fixed Info

// Read returns the fixed reading. A fixed Pressure without a Signal is taken as the
// signal too, so that Freed weighs it against the added memory.
func (f Fixed) Read() (Info, error) {
	i := Info(f)
	if i.Source == "" {
		i.Source = "fixed"
	}
	if i.Signal == Normal {
		i.Signal = i.Pressure
	}
	return i, nil
}

// System returns the Sensor of the running operating system. With MLXG_MEMORY_SIGNAL=off
// (or 0, false) the level comes from the available memory alone.
func System() Sensor {
	s := systemSensor()
	switch strings.ToLower(strings.TrimSpace(os.Getenv("MLXG_MEMORY_SIGNAL"))) {
	case "off", "0", "false", "no":
		return NoSignal{s}
	}
	return s
}

// NoSignal reads through Sensor but ignores the operating system's signal: the level
// comes from the available memory alone.
type NoSignal struct{ Sensor Sensor }

// Read implements Sensor.
func (n NoSignal) Read() (Info, error) {
	i, err := n.Sensor.Read()
	if err != nil {
		return i, err
	}
	i.Signal = Normal
	i.Pressure = level(Normal, i.Available, i.Total)
	i.Source += " (signal off)"
	return i, nil
}
