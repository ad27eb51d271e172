package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mlxg/mlxg/internal/procstatus"
)

// treePeakRSS sums VmHWM (each process's own peak resident set) over pid and its
// descendants, in bytes. A process's peak is kept by the kernel, so sampling misses no spike
// of a process that is still alive when sampled.
func treePeakRSS(root int) int64 {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	parent := map[int]int{}
	for _, p := range stats {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses, so cut at the last ')'.
		i := bytes.LastIndexByte(raw, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(raw[i+1:]))
		pid, err1 := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		ppid, err2 := 0, error(nil)
		if len(f) > 1 {
			ppid, err2 = strconv.Atoi(f[1])
		}
		if err1 == nil && err2 == nil {
			parent[pid] = ppid
		}
	}
	var total int64
	for pid := range parent {
		if inTree(pid, root, parent) {
			total += vmHWM(pid)
		}
	}
	return total
}

func inTree(pid, root int, parent map[int]int) bool {
	for range 64 {
		if pid == root {
			return true
		}
		p, ok := parent[pid]
		if !ok || p <= 1 {
			return false
		}
		pid = p
	}
	return false
}

// vmHWM is /proc/pid/status's VmHWM in bytes, 0 when unreadable.
func vmHWM(pid int) int64 { return procstatus.Bytes(pid, "VmHWM") }
