package sysmem

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"
)

// fakeRoot writes files (relative path -> content) under a temp dir.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const meminfo = `MemTotal:       32000000 kB
MemFree:         1000000 kB
MemAvailable:   20000000 kB
Buffers:            3140 kB
Cached:           300416 kB
SwapTotal:       2000000 kB
SwapFree:        1500000 kB
`

func psi(some, full string) string {
	return "some avg10=" + some + " avg60=0.00 avg300=0.00 total=1\nfull avg10=" + full + " avg60=0.00 avg300=0.00 total=1\n"
}

func TestLinuxMeminfoAndPSI(t *testing.T) {
	cases := []struct {
		name      string
		files     map[string]string
		total     uint64
		available uint64
		pressure  Pressure
	}{
		{"calm", map[string]string{"proc/meminfo": meminfo, "proc/pressure/memory": psi("0.50", "0.00")},
			32000000 * 1024, 20000000 * 1024, Normal},
		{"some stalls", map[string]string{"proc/meminfo": meminfo, "proc/pressure/memory": psi("12.00", "3.00")},
			32000000 * 1024, 20000000 * 1024, Warn},
		{"full stalls", map[string]string{"proc/meminfo": meminfo, "proc/pressure/memory": psi("40.00", "15.25")},
			32000000 * 1024, 20000000 * 1024, Critical},
		{"no psi, low available", map[string]string{"proc/meminfo": "MemTotal: 1000 kB\nMemAvailable: 80 kB\n"},
			1000 * 1024, 80 * 1024, Warn},
		{"no psi, very low available", map[string]string{"proc/meminfo": "MemTotal: 1000 kB\nMemAvailable: 30 kB\n"},
			1000 * 1024, 30 * 1024, Critical},
		{"old kernel without MemAvailable", map[string]string{"proc/meminfo": "MemTotal: 1000 kB\nMemFree: 300 kB\nBuffers: 100 kB\nCached: 200 kB\n"},
			1000 * 1024, 600 * 1024, Normal},
		{"cgroup limit", map[string]string{
			"proc/meminfo":                       meminfo,
			"proc/self/cgroup":                   "0::/box\n",
			"sys/fs/cgroup/box/memory.max":       "8000000000\n",
			"sys/fs/cgroup/box/memory.current":   "6000000000\n",
			"sys/fs/cgroup/other/memory.current": "1\n",
		}, 8000000000, 2000000000, Normal},
		{"cgroup without limit", map[string]string{
			"proc/meminfo":                     meminfo,
			"proc/self/cgroup":                 "0::/box\n",
			"sys/fs/cgroup/box/memory.max":     "max\n",
			"sys/fs/cgroup/box/memory.current": "6000000000\n",
		}, 32000000 * 1024, 20000000 * 1024, Normal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			info, err := Linux{Root: fakeRoot(t, c.files)}.Read()
			if err != nil {
				t.Fatal(err)
			}
			if info.Total != c.total || info.Available != c.available || info.Pressure != c.pressure {
				t.Errorf("got total %d available %d pressure %v; want %d %d %v",
					info.Total, info.Available, info.Pressure, c.total, c.available, c.pressure)
			}
		})
	}
}

func TestLinuxSwap(t *testing.T) {
	info, err := Linux{Root: fakeRoot(t, map[string]string{"proc/meminfo": meminfo})}.Read()
	if err != nil {
		t.Fatal(err)
	}
	if info.SwapTotal != 2000000*1024 || info.SwapUsed != 500000*1024 {
		t.Errorf("swap total %d used %d", info.SwapTotal, info.SwapUsed)
	}
}

func TestLinuxErrors(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"missing meminfo": {},
		"no MemTotal":     {"proc/meminfo": "MemFree: 10 kB\n"},
		"bad number":      {"proc/meminfo": "MemTotal: lots kB\n"},
		"bad psi":         {"proc/meminfo": meminfo, "proc/pressure/memory": "some avg10=x\n"},
	} {
		if _, err := (Linux{Root: fakeRoot(t, files)}).Read(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestDarwinArithmetic(t *testing.T) {
	if got := unsafe.Sizeof(vmStatistics64{}); got != hostVMInfo64Count*4 {
		t.Fatalf("vm_statistics64 is %d bytes, want %d", got, hostVMInfo64Count*4)
	}
	vm := vmStatistics64{FreeCount: 1000, InactiveCount: 3000, SpeculativeCount: 200, WireCount: 500, CompressorPageCount: 70}
	info := darwinInfo(1<<30, 2, vm, 16384, 4<<30, 1<<30)
	if info.Available != 4000*16384 || info.Wired != 500*16384 || info.Compressed != 70*16384 || info.Pressure != Warn {
		t.Errorf("got %+v", info)
	}
	for level, want := range map[uint32]Pressure{0: Normal, 1: Normal, 2: Warn, 4: Critical} {
		if got := darwinPressure(level); got != want {
			t.Errorf("level %d: got %v want %v", level, got, want)
		}
	}
	// Available never exceeds the machine.
	if got := darwinInfo(1000, 1, vm, 16384, 0, 0).Available; got != 1000 {
		t.Errorf("available %d exceeds total", got)
	}
}

func TestPressureParse(t *testing.T) {
	for _, p := range []Pressure{Normal, Warn, Critical} {
		got, err := ParsePressure(p.String())
		if err != nil || got != p {
			t.Errorf("%v: got %v, %v", p, got, err)
		}
	}
	if _, err := ParsePressure("high"); err == nil {
		t.Error("ParsePressure(high): no error")
	}
}

func TestSystemReads(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the real sensor is exercised on linux only; darwin's arithmetic is tested above")
	}
	info, err := System().Read()
	if err != nil {
		t.Fatal(err)
	}
	if info.Total == 0 || info.Available == 0 || info.Available > info.Total {
		t.Errorf("implausible reading: %v", info)
	}
}

func BenchmarkSystemRead(b *testing.B) {
	s := System()
	for b.Loop() {
		if _, err := s.Read(); err != nil {
			b.Fatal(err)
		}
	}
}
