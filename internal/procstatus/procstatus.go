// Package procstatus reads memory fields of /proc/<pid>/status on Linux, for the
// measuring scripts (scripts/bench, scripts/cpumem, scripts/mlxmem).
package procstatus

import (
	"os"
	"strconv"
	"strings"
)

// Bytes is field (VmRSS, RssAnon, RssFile, VmHWM, ...) of /proc/<pid>/status in bytes;
// pid 0 means this process. It is 0 where the file or the field cannot be read.
func Bytes(pid int, field string) int64 {
	path := "/proc/self/status"
	if pid != 0 {
		path = "/proc/" + strconv.Itoa(pid) + "/status"
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}
