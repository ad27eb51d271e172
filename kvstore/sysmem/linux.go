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

// Linux reads /proc/meminfo, the process's cgroup memory files and /proc/pressure/memory
// under Root ("/" on a real system; a directory of fake /proc and /sys trees in tests).
//
// Available is MemAvailable, narrowed by the tightest cgroup limit over the process's
// cgroup and its ancestors (v2 memory.max, v1 memory.limit_in_bytes) less what is in use
// there (memory.current or memory.usage_in_bytes, less the inactive page cache, which
// the kernel reclaims first). Total is the machine, or that limit when smaller.
type Linux struct {
	Root string
}

// PSI: a stall counts as a signal only when it is sustained, every window at least this
// share of the time: a burst of stalls (another job paging in its data) fills avg10 long
// before avg60 and avg300 follow. "some" stalls are a warn signal, "full" stalls (every
// non-idle task waiting) a critical one; level.go then weighs the signal against what
// is available, so stalls alone never refuse a load while memory is free.
const (
	psiAvg10  = 10.0
	psiAvg60  = 10.0
	psiAvg300 = 5.0
)

// swapFullShare: a swap this full is a warn signal (the kernel has nowhere left to put
// anonymous pages), weighed like the stalls.
const swapFullShare = 0.90

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

	if info.SwapTotal > 0 && float64(info.SwapUsed) >= swapFullShare*float64(info.SwapTotal) {
		info.Signal = Warn
	}
	if b, err := os.ReadFile(l.path("proc/pressure/memory")); err == nil {
		psi, err := parsePSI(b)
		if err != nil {
			return Info{}, fmt.Errorf("reading %s: %w", l.path("proc/pressure/memory"), err)
		}
		info.Source += "+psi"
		switch {
		case psi["full"].sustained():
			info.Signal = Critical
		case psi["some"].sustained():
			info.Signal = max(info.Signal, Warn)
		}
	}
	info.Pressure = level(info.Signal, info.Available, info.Total)
	return info, nil
}

// applyCgroup narrows Total and Available to the process's cgroup limits, v2 and v1.
func (l Linux) applyCgroup(info *Info) {
	cg, err := os.ReadFile(l.path("proc/self/cgroup"))
	if err != nil {
		return
	}
	mounts, _ := os.ReadFile(l.path("proc/self/mountinfo")) // none: the usual mount points
	machine := info.Total
	for _, c := range []cgroupVersion{cgroupV2, cgroupV1} {
		dir, top, ok := l.cgroupDir(c, cg, mounts)
		if !ok {
			continue
		}
		limit, avail, ok := c.tightest(dir, top, machine)
		if !ok {
			continue
		}
		info.Total = min(info.Total, limit)
		info.Limited = info.Total < machine
		info.Available = min(info.Available, avail)
		info.Source += "+cgroup " + c.name
	}
}

// cgroupVersion names one hierarchy's files.
type cgroupVersion struct {
	name             string
	limit, usage     string   // files
	inactive         []string // memory.stat keys of the inactive page cache, preferred first
	fstype, superOpt string   // of its mount in mountinfo
	defaultMount     string
	matches          func(id, controllers string) bool // a /proc/self/cgroup line's first two fields
}

var (
	cgroupV2 = cgroupVersion{name: "v2", limit: "memory.max", usage: "memory.current", inactive: []string{"inactive_file"},
		fstype: "cgroup2", defaultMount: "sys/fs/cgroup",
		matches: func(id, c string) bool { return id == "0" && c == "" }}
	cgroupV1 = cgroupVersion{name: "v1", limit: "memory.limit_in_bytes", usage: "memory.usage_in_bytes",
		inactive: []string{"total_inactive_file", "inactive_file"}, fstype: "cgroup", superOpt: "memory",
		defaultMount: "sys/fs/cgroup/memory",
		matches:      func(_, c string) bool { return hasOption(c, "memory") }}
)

// cgroupDir finds the directory of the process's cgroup in hierarchy c (dir) and the
// directory of the hierarchy's mount (top), both under l.Root.
func (l Linux) cgroupDir(c cgroupVersion, cg, mountinfo []byte) (dir, top string, ok bool) {
	var path string
	found := false
	for line := range strings.SplitSeq(strings.TrimSpace(string(cg)), "\n") {
		// hierarchy-ID:controller-list:cgroup-path; v2's line is "0::/path".
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && c.matches(f[0], f[1]) {
			path, found = f[2], true
		}
	}
	if !found {
		return "", "", false
	}
	mountPoint, mountRoot := "/"+c.defaultMount, "/"
	if mp, root, ok := findMount(mountinfo, c.fstype, c.superOpt); ok {
		mountPoint, mountRoot = mp, root
	}
	// The mount shows the hierarchy from mountRoot down (a container sees its own cgroup
	// as the root): the process's path is relative to it.
	rel := path
	if mountRoot != "/" {
		if r, ok := strings.CutPrefix(path, mountRoot); ok && (r == "" || r[0] == '/') {
			rel = r
		}
	}
	top = l.path(mountPoint)
	dir = filepath.Join(top, rel)
	if !strings.HasPrefix(dir, top) {
		return "", "", false
	}
	if _, err := os.Stat(dir); err != nil {
		dir = top // a path from another namespace: the mount's root is the closest we see
	}
	return dir, top, true
}

// findMount returns the mount point and root of the first mount of fstype whose super
// options include superOpt (if set).
func findMount(mountinfo []byte, fstype, superOpt string) (point, root string, ok bool) {
	for line := range strings.SplitSeq(string(mountinfo), "\n") {
		// id parent major:minor root mount-point options [optional...] - fstype source super-options
		pre, post, found := strings.Cut(line, " - ")
		if !found {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 1 || qf[0] != fstype {
			continue
		}
		if superOpt != "" {
			if len(qf) < 3 || !hasOption(qf[2], superOpt) {
				continue
			}
		}
		return unescapeMount(pf[4]), unescapeMount(pf[3]), true
	}
	return "", "", false
}

func hasOption(opts, want string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// tightest walks from dir up to top and returns the lowest limit below total and the least
// memory left under any limit on the way. A limit of "max", or one at least total (v1's
// "unlimited" is a huge number), is no limit.
func (c cgroupVersion) tightest(dir, top string, total uint64) (limit, avail uint64, ok bool) {
	for d := dir; ; d = filepath.Dir(d) {
		if lim, err := readUint(filepath.Join(d, c.limit)); err == nil && lim < total {
			if used, err := readUint(filepath.Join(d, c.usage)); err == nil {
				used -= min(used, c.inactiveFile(d))
				left := lim - min(used, lim)
				if !ok || lim < limit {
					limit = lim
				}
				if !ok || left < avail {
					avail = left
				}
				ok = true
			}
		}
		if d == top || len(d) <= len(top) {
			return limit, avail, ok
		}
	}
}

// inactiveFile is the cgroup's inactive page cache (memory.stat), which it gives back
// before anything else; 0 when unknown.
func (c cgroupVersion) inactiveFile(dir string) uint64 {
	b, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return 0
	}
	stat := map[string]uint64{}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			stat[k] = n
		}
	}
	for _, k := range c.inactive {
		if n, ok := stat[k]; ok {
			return n
		}
	}
	return 0
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

// psiAvgs are one PSI line's running averages, in percent of wall time.
type psiAvgs struct{ avg10, avg60, avg300 float64 }

func (a psiAvgs) sustained() bool {
	return a.avg10 >= psiAvg10 && a.avg60 >= psiAvg60 && a.avg300 >= psiAvg300
}

// parsePSI reads the "some" and "full" lines of /proc/pressure/memory
// ("some avg10=1.00 avg60=0.50 avg300=0.10 total=12345").
func parsePSI(b []byte) (map[string]psiAvgs, error) {
	out := map[string]psiAvgs{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil, fmt.Errorf("unexpected line %q", line)
		}
		var a psiAvgs
		seen := 0
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			var dst *float64
			switch k {
			case "avg10":
				dst = &a.avg10
			case "avg60":
				dst = &a.avg60
			case "avg300":
				dst = &a.avg300
			default:
				continue
			}
			x, err := strconv.ParseFloat(v, 64)
			if !ok || err != nil {
				return nil, fmt.Errorf("line %q: bad %s", line, kv)
			}
			*dst = x
			seen++
		}
		if seen == 0 {
			return nil, fmt.Errorf("unexpected line %q", line)
		}
		out[f[0]] = a
	}
	return out, nil
}
