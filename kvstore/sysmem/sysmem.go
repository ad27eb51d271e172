// Package sysmem reads how much memory the machine has, how much is available, and
// the memory pressure level, behind one interface (Sensor) so that the KV-cache policy
// can be tested with faked readings.
//
// Supported: darwin (sysctl hw.memsize and kern.memorystatus_vm_pressure_level, page
// counts from host_statistics64 in libSystem through purego, swap from vm.swapusage;
// builds with CGO_ENABLED=0) and linux (/proc/meminfo MemAvailable, PSI from
// /proc/pressure/memory, a cgroup v2 memory.max limit when one applies). Other systems
// get a Sensor whose Read returns an error. One Read costs tens of microseconds, so a
// caller may read it per request.
package sysmem

import (
	"fmt"

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
	Total      uint64 // physical memory (or the cgroup limit)
	Available  uint64 // memory a new allocation can take without swapping: free + reclaimable
	Wired      uint64 // darwin only: pages the kernel cannot page out
	Compressed uint64 // darwin only: memory held by the compressor
	SwapTotal  uint64
	SwapUsed   uint64
	Pressure   Pressure
	Source     string // what was read, for logs: "darwin sysctl+host_statistics64", "linux /proc/meminfo+psi", "fixed"
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

// Read returns the fixed reading.
func (f Fixed) Read() (Info, error) {
	i := Info(f)
	if i.Source == "" {
		i.Source = "fixed"
	}
	return i, nil
}

// System returns the Sensor of the running operating system.
func System() Sensor { return systemSensor() }
