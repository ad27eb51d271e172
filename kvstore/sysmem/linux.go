package sysmem

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Linux reads /proc/meminfo, /proc/pressure/memory and the cgroup v2 memory files under
// Root ("/" on a real system; a directory of fake files in tests).
type Linux struct {
	Root string
}

// PSI thresholds: the share of the last 10 s in which some task (Warn) or every
// non-idle task (Critical) stalled waiting for memory.
const (
	psiWarnSome     = 10.0
	psiCriticalFull = 10.0
)

// Available-memory floors below which pressure is raised even without PSI (kernels
// built without it, or a cgroup filling up): a share of Total.
const (
	availWarnShare     = 0.10
	availCriticalShare = 0.04
)

func (l Linux) path(p string) string { return filepath.Join(l.Root, p) }

// Read implements Sensor.
func (l Linux) Read() (Info, error) {
	mi, err := os.ReadFile(l.path("proc/meminfo"))
	if err != nil {
		return Info{}, fmt.Errorf("reading memory size: %w", err)
	}
	fields, err := parseMeminfo(mi)
	if err != nil {
		return Info{}, fmt.Errorf("reading %s: %w", l.path("proc/meminfo"), err)
	}
	info := Info{
		Total:     fields["MemTotal"],
		Available: fields["MemAvailable"],
		SwapTotal: fields["SwapTotal"],
		Source:    "linux /proc/meminfo",
	}
	if free, ok := fields["SwapFree"]; ok && free <= info.SwapTotal {
		info.SwapUsed = info.SwapTotal - free
	}
	if _, ok := fields["MemAvailable"]; !ok { // kernels before 3.14
		info.Available = fields["MemFree"] + fields["Buffers"] + fields["Cached"]
	}
	l.applyCgroup(&info)

	if psi, err := os.ReadFile(l.path("proc/pressure/memory")); err == nil {
		some, full, err := parsePSI(psi)
		if err != nil {
			return Info{}, fmt.Errorf("reading %s: %w", l.path("proc/pressure/memory"), err)
		}
		info.Source += "+psi"
		switch {
		case full >= psiCriticalFull:
			info.Pressure = Critical
		case some >= psiWarnSome:
			info.Pressure = Warn
		}
	}
	info.Pressure = max(info.Pressure, pressureFromAvailable(info.Available, info.Total))
	return info, nil
}

// pressureFromAvailable is the floor every platform shares: little available memory is
// pressure whatever the kernel's own signal says.
func pressureFromAvailable(avail, total uint64) Pressure {
	switch {
	case total == 0:
		return Normal
	case float64(avail) < availCriticalShare*float64(total):
		return Critical
	case float64(avail) < availWarnShare*float64(total):
		return Warn
	}
	return Normal
}

// applyCgroup narrows Total and Available to the process's cgroup v2 limit, if lower.
func (l Linux) applyCgroup(info *Info) {
	cg, err := os.ReadFile(l.path("proc/self/cgroup"))
	if err != nil {
		return
	}
	var dir string
	for line := range strings.SplitSeq(strings.TrimSpace(string(cg)), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			dir = l.path(filepath.Join("sys/fs/cgroup", rest))
		}
	}
	if dir == "" {
		return
	}
	limit, err1 := readUint(filepath.Join(dir, "memory.max")) // "max" fails to parse: no limit
	used, err2 := readUint(filepath.Join(dir, "memory.current"))
	if err1 != nil || err2 != nil || limit >= info.Total {
		return
	}
	info.Total = limit
	info.Available = min(info.Available, limit-min(used, limit))
	info.Source += "+cgroup"
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// parseMeminfo reads "Key:   123 kB" lines into bytes.
func parseMeminfo(b []byte) (map[string]uint64, error) {
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", key, err)
		}
		if len(f) > 1 && f[1] == "kB" {
			v *= 1024
		}
		out[key] = v
	}
	if _, ok := out["MemTotal"]; !ok {
		return nil, fmt.Errorf("no MemTotal line")
	}
	return out, nil
}

// parsePSI returns the avg10 percentages of the "some" and "full" lines.
func parsePSI(b []byte) (some, full float64, err error) {
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasPrefix(f[1], "avg10=") {
			return 0, 0, fmt.Errorf("unexpected line %q", line)
		}
		v, err := strconv.ParseFloat(strings.TrimPrefix(f[1], "avg10="), 64)
		if err != nil {
			return 0, 0, fmt.Errorf("line %q: %w", line, err)
		}
		switch f[0] {
		case "some":
			some = v
		case "full":
			full = v
		}
	}
	return some, full, nil
}
