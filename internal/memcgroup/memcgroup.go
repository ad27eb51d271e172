// Package memcgroup makes a memory cgroup under the calling process's own, for tests and
// benchmarks that run one process under a memory cap: cgroup v1 (memory.limit_in_bytes) or
// v2 (memory.max). The process that is measured joins it (Join, or a shell's `echo $$` into
// Procs before it execs), nothing else; Remove deletes it once that process is gone.
package memcgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Cgroup is a memory cgroup with a limit.
type Cgroup struct {
	Dir   string
	Procs string // the file a process joins by writing its pid
	peak  string // memory.max_usage_in_bytes (v1) or memory.peak (v2)
	Limit int64
}

var made atomic.Int64

// New makes a child of this process's memory cgroup with a limit of limit bytes. It fails
// where there is none or it may not be created (not root, a read-only cgroup file system).
func New(limit int64) (*Cgroup, error) {
	raw, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("mlxg-%d-%d", os.Getpid(), made.Add(1))
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, limitFile, peakFile string
		switch {
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			dir, limitFile, peakFile = filepath.Join("/sys/fs/cgroup/memory", parts[2], name), "memory.limit_in_bytes", "memory.max_usage_in_bytes"
		case parts[0] == "0" && parts[1] == "":
			if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
				continue // a v1 host's empty v2 hierarchy
			}
			dir, limitFile, peakFile = filepath.Join("/sys/fs/cgroup", parts[2], name), "memory.max", "memory.peak"
		default:
			continue
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating a memory cgroup (%s): %w", dir, err)
		}
		if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			os.Remove(dir)
			return nil, fmt.Errorf("setting %s: %w", filepath.Join(dir, limitFile), err)
		}
		return &Cgroup{Dir: dir, Procs: filepath.Join(dir, "cgroup.procs"), peak: filepath.Join(dir, peakFile), Limit: limit}, nil
	}
	return nil, errors.New("no memory cgroup found in /proc/self/cgroup")
}

// Join moves process pid into the cgroup.
func (c *Cgroup) Join(pid int) error {
	return os.WriteFile(c.Procs, []byte(strconv.Itoa(pid)), 0o644)
}

// Peak is the most memory the cgroup's processes used, 0 where that cannot be read.
func (c *Cgroup) Peak() int64 {
	raw, err := os.ReadFile(c.peak)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	return n
}

// OOMKills is the cgroup's count of processes killed for memory (memory.events' oom_kill on
// v2, memory.oom_control's on v1), -1 where it cannot be read.
func (c *Cgroup) OOMKills() int64 {
	for _, f := range []string{"memory.events", "memory.oom_control"} {
		raw, err := os.ReadFile(filepath.Join(c.Dir, f))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
	}
	return -1
}

// Remove deletes the cgroup once its processes are gone (it waits up to 5 s for them).
func (c *Cgroup) Remove() error {
	var err error
	for range 50 {
		if err = os.Remove(c.Dir); err == nil || os.IsNotExist(err) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("removing the cgroup %s: %w", c.Dir, err)
}
