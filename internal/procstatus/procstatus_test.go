package procstatus

import (
	"runtime"
	"testing"
)

func TestBytes(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	rss := Bytes(0, "VmRSS")
	if rss <= 0 || rss%1024 != 0 {
		t.Errorf("VmRSS of this process: %d bytes", rss)
	}
	if hwm := Bytes(0, "VmHWM"); hwm < rss {
		t.Errorf("VmHWM %d below VmRSS %d", hwm, rss)
	}
	if n := Bytes(0, "NoSuchField"); n != 0 {
		t.Errorf("an unknown field read as %d", n)
	}
}
