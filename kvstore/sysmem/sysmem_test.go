package sysmem

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
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

const gib = uint64(1) << 30

// meminfoGiB is a /proc/meminfo of total GiB with avail GiB available (fractions allowed)
// and no swap.
func meminfoGiB(total, avail float64) string {
	return fmt.Sprintf("MemTotal: %d kB\nMemFree: 1000 kB\nMemAvailable: %d kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n",
		uint64(total*(1<<20)), uint64(avail*(1<<20)))
}

func psi(some, full string) string {
	return "some avg10=" + some + " avg60=0.00 avg300=0.00 total=1\nfull avg10=" + full + " avg60=0.00 avg300=0.00 total=1\n"
}

// psi3 is a PSI file whose some and full lines read avg10, avg60 and avg300.
func psi3(some, full [3]float64) string {
	return fmt.Sprintf("some avg10=%.2f avg60=%.2f avg300=%.2f total=1\nfull avg10=%.2f avg60=%.2f avg300=%.2f total=1\n",
		some[0], some[1], some[2], full[0], full[1], full[2])
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
		{"a burst of stalls with most memory free", map[string]string{"proc/meminfo": meminfo, "proc/pressure/memory": psi("40.00", "15.25")},
			32000000 * 1024, 20000000 * 1024, Normal},
		{"no psi, low available", map[string]string{"proc/meminfo": meminfoGiB(16, 1.5)},
			16 * gib, 3 * gib / 2, Warn},
		{"no psi, very low available", map[string]string{"proc/meminfo": meminfoGiB(16, 0.5)},
			16 * gib, gib / 2, Critical},
		{"small machine under the absolute floor", map[string]string{"proc/meminfo": meminfoGiB(2, 0.125)},
			2 * gib, gib / 8, Critical},
		{"old kernel without MemAvailable", map[string]string{"proc/meminfo": "MemTotal: 1000000 kB\nMemFree: 300000 kB\nBuffers: 100000 kB\nCached: 200000 kB\n"},
			1000000 * 1024, 600000 * 1024, Normal},
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

// TestLinuxPSIIsSecondary: stalls count only when sustained over every window and only
// where memory is not plentiful; alone they never make critical while memory is free.
func TestLinuxPSIIsSecondary(t *testing.T) {
	none := [3]float64{}
	burst := [3]float64{20, 8, 2}       // another job's burst: avg10 high, the longer windows not yet
	sustained := [3]float64{25, 20, 12} // stalls for minutes
	cases := []struct {
		name       string
		total, av  float64 // GiB
		some, full [3]float64
		want       Pressure
	}{
		// The incident: 20 of 24 GiB free, full avg10 at 19-20% while other jobs ran.
		{"full burst, most memory free", 24, 20, burst, burst, Normal},
		{"full sustained, most memory free", 24, 20, sustained, sustained, Normal},
		{"some sustained, most memory free", 24, 20, sustained, none, Normal},
		{"full burst, memory not plentiful", 24, 8, burst, burst, Normal},
		{"some sustained, memory not plentiful", 24, 8, sustained, none, Warn},
		{"full sustained, memory not plentiful", 24, 8, sustained, sustained, Warn},
		{"full sustained, memory low", 24, 2, sustained, sustained, Critical},
		{"no stalls, memory low", 24, 2, none, none, Warn},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			info, err := Linux{Root: fakeRoot(t, map[string]string{
				"proc/meminfo":         meminfoGiB(c.total, c.av),
				"proc/pressure/memory": psi3(c.some, c.full),
			})}.Read()
			if err != nil {
				t.Fatal(err)
			}
			if info.Pressure != c.want {
				t.Errorf("pressure %v (signal %v), want %v: %v", info.Pressure, info.Signal, c.want, info)
			}
			if c.av >= c.total/2 && info.Pressure != Normal {
				t.Errorf("stalls raised the level with most memory free: %v", info)
			}
		})
	}
}

func TestLinuxCgroups(t *testing.T) {
	const v1Mounts = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	const v2Mounts = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
	const v1Cgroup = "5:cpu,cpuacct:/box\n4:memory:/box\n0::/box\n"
	const unlimitedV1 = "9223372036854771712\n"
	mem := meminfoGiB(24, 20)
	cases := []struct {
		name      string
		files     map[string]string
		total     uint64
		available uint64
		pressure  Pressure
	}{
		{"no cgroup files", map[string]string{"proc/meminfo": mem}, 24 * gib, 20 * gib, Normal},
		{"v1 limit 2 GiB, 1.9 GiB used", map[string]string{
			"proc/meminfo":        mem,
			"proc/self/cgroup":    v1Cgroup,
			"proc/self/mountinfo": v1Mounts,
			"sys/fs/cgroup/memory/box/memory.limit_in_bytes": fmt.Sprint(2 * gib),
			"sys/fs/cgroup/memory/box/memory.usage_in_bytes": fmt.Sprint(19 * gib / 10),
			"sys/fs/cgroup/memory/memory.limit_in_bytes":     unlimitedV1,
			"sys/fs/cgroup/memory/memory.usage_in_bytes":     fmt.Sprint(10 * gib),
		}, 2 * gib, 2*gib - 19*gib/10, Critical},
		{"v1 limit, page cache reclaimable", map[string]string{
			"proc/meminfo":        mem,
			"proc/self/cgroup":    v1Cgroup,
			"proc/self/mountinfo": v1Mounts,
			"sys/fs/cgroup/memory/box/memory.limit_in_bytes": fmt.Sprint(8 * gib),
			"sys/fs/cgroup/memory/box/memory.usage_in_bytes": fmt.Sprint(7 * gib),
			"sys/fs/cgroup/memory/box/memory.stat":           fmt.Sprintf("cache 5\ninactive_file 1\ntotal_inactive_file %d\n", 3*gib),
		}, 8 * gib, 4 * gib, Normal},
		{"v1 unlimited", map[string]string{
			"proc/meminfo":        mem,
			"proc/self/cgroup":    v1Cgroup,
			"proc/self/mountinfo": v1Mounts,
			"sys/fs/cgroup/memory/box/memory.limit_in_bytes": unlimitedV1,
			"sys/fs/cgroup/memory/box/memory.usage_in_bytes": fmt.Sprint(6 * gib),
		}, 24 * gib, 20 * gib, Normal},
		{"v1 without mountinfo: the usual mount point", map[string]string{
			"proc/meminfo":     mem,
			"proc/self/cgroup": v1Cgroup,
			"sys/fs/cgroup/memory/box/memory.limit_in_bytes": fmt.Sprint(2 * gib),
			"sys/fs/cgroup/memory/box/memory.usage_in_bytes": fmt.Sprint(19 * gib / 10),
		}, 2 * gib, 2*gib - 19*gib/10, Critical},
		{"v1 limit on an ancestor", map[string]string{
			"proc/meminfo":        mem,
			"proc/self/cgroup":    "4:memory:/slice/box\n",
			"proc/self/mountinfo": v1Mounts,
			"sys/fs/cgroup/memory/slice/box/memory.limit_in_bytes": unlimitedV1,
			"sys/fs/cgroup/memory/slice/box/memory.usage_in_bytes": fmt.Sprint(1 * gib),
			"sys/fs/cgroup/memory/slice/memory.limit_in_bytes":     fmt.Sprint(4 * gib),
			"sys/fs/cgroup/memory/slice/memory.usage_in_bytes":     fmt.Sprint(3 * gib),
		}, 4 * gib, 1 * gib, Normal},
		{"v2 limit 2 GiB, 1.9 GiB used", map[string]string{
			"proc/meminfo":                     mem,
			"proc/self/cgroup":                 "0::/box\n",
			"proc/self/mountinfo":              v2Mounts,
			"sys/fs/cgroup/box/memory.max":     fmt.Sprint(2 * gib),
			"sys/fs/cgroup/box/memory.current": fmt.Sprint(19 * gib / 10),
		}, 2 * gib, 2*gib - 19*gib/10, Critical},
		{"v2 limit", map[string]string{
			"proc/meminfo":                       meminfo,
			"proc/self/cgroup":                   "0::/box\n",
			"sys/fs/cgroup/box/memory.max":       "8000000000\n",
			"sys/fs/cgroup/box/memory.current":   "6000000000\n",
			"sys/fs/cgroup/other/memory.current": "1\n",
		}, 8000000000, 2000000000, Normal},
		{"v2 limit, page cache reclaimable", map[string]string{
			"proc/meminfo":                     mem,
			"proc/self/cgroup":                 "0::/box\n",
			"proc/self/mountinfo":              v2Mounts,
			"sys/fs/cgroup/box/memory.max":     fmt.Sprint(8 * gib),
			"sys/fs/cgroup/box/memory.current": fmt.Sprint(7 * gib),
			"sys/fs/cgroup/box/memory.stat":    fmt.Sprintf("anon 1\nactive_file 5\ninactive_file %d\n", 3*gib),
		}, 8 * gib, 4 * gib, Normal},
		{"v2 without limit", map[string]string{
			"proc/meminfo":                     meminfo,
			"proc/self/cgroup":                 "0::/box\n",
			"sys/fs/cgroup/box/memory.max":     "max\n",
			"sys/fs/cgroup/box/memory.current": "6000000000\n",
		}, 32000000 * 1024, 20000000 * 1024, Normal},
		{"v2 in a container: the mount's root is the process's cgroup", map[string]string{
			"proc/meminfo":                 mem,
			"proc/self/cgroup":             "0::/docker/abc\n",
			"proc/self/mountinfo":          "30 23 0:26 /docker/abc /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n",
			"sys/fs/cgroup/memory.max":     fmt.Sprint(2 * gib),
			"sys/fs/cgroup/memory.current": fmt.Sprint(19 * gib / 10),
		}, 2 * gib, 2*gib - 19*gib/10, Critical},
		{"v2 mounted elsewhere (hybrid)", map[string]string{
			"proc/meminfo":                               mem,
			"proc/self/cgroup":                           "4:memory:/\n0::/box\n",
			"proc/self/mountinfo":                        v1Mounts,
			"sys/fs/cgroup/unified/box/memory.max":       fmt.Sprint(2 * gib),
			"sys/fs/cgroup/unified/box/memory.current":   fmt.Sprint(19 * gib / 10),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": unlimitedV1,
			"sys/fs/cgroup/memory/memory.usage_in_bytes": fmt.Sprint(10 * gib),
		}, 2 * gib, 2*gib - 19*gib/10, Critical},
		{"v1 and v2 both limited: the tighter", map[string]string{
			"proc/meminfo":                                   mem,
			"proc/self/cgroup":                               v1Cgroup,
			"proc/self/mountinfo":                            v1Mounts,
			"sys/fs/cgroup/unified/box/memory.max":           fmt.Sprint(6 * gib),
			"sys/fs/cgroup/unified/box/memory.current":       fmt.Sprint(1 * gib),
			"sys/fs/cgroup/memory/box/memory.limit_in_bytes": fmt.Sprint(8 * gib),
			"sys/fs/cgroup/memory/box/memory.usage_in_bytes": fmt.Sprint(6 * gib),
		}, 6 * gib, 2 * gib, Normal},
		{"limit above the machine: no limit", map[string]string{
			"proc/meminfo":                     mem,
			"proc/self/cgroup":                 "0::/box\n",
			"sys/fs/cgroup/box/memory.max":     fmt.Sprint(64 * gib),
			"sys/fs/cgroup/box/memory.current": fmt.Sprint(23 * gib),
		}, 24 * gib, 20 * gib, Normal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			info, err := Linux{Root: fakeRoot(t, c.files)}.Read()
			if err != nil {
				t.Fatal(err)
			}
			if info.Total != c.total || info.Available != c.available || info.Pressure != c.pressure {
				t.Errorf("got total %d available %d pressure %v; want %d %d %v (%s)",
					info.Total, info.Available, info.Pressure, c.total, c.available, c.pressure, info.Source)
			}
			if info.Limited != (c.total < 24*gib) {
				t.Errorf("limited %v with total %d of the machine's 24 GiB", info.Limited, info.Total)
			}
		})
	}
}

func TestLinuxSwapSignal(t *testing.T) {
	for _, c := range []struct {
		avail float64
		want  Pressure
	}{{14, Normal}, {6, Warn}} {
		m := meminfoGiB(24, c.avail) + "SwapTotal: 4000000 kB\nSwapFree: 100000 kB\n"
		info, err := Linux{Root: fakeRoot(t, map[string]string{"proc/meminfo": m})}.Read()
		if err != nil {
			t.Fatal(err)
		}
		if info.Signal != Warn || info.Pressure != c.want {
			t.Errorf("swap nearly full, %v GiB available: signal %v pressure %v, want warn %v", c.avail, info.Signal, info.Pressure, c.want)
		}
	}
}

func TestLevel(t *testing.T) {
	const total = 100 * gib
	for _, c := range []struct {
		signal Pressure
		avail  uint64
		want   Pressure
	}{
		{Normal, 60 * gib, Normal}, {Warn, 60 * gib, Normal}, {Critical, 60 * gib, Normal},
		{Normal, 30 * gib, Normal}, {Warn, 30 * gib, Warn}, {Critical, 30 * gib, Warn},
		{Normal, 8 * gib, Warn}, {Warn, 8 * gib, Warn}, {Critical, 8 * gib, Critical},
		{Normal, 3 * gib, Critical},
	} {
		if got := level(c.signal, c.avail, total); got != c.want {
			t.Errorf("signal %v, %d GiB of 100 available: %v, want %v", c.signal, c.avail/gib, got, c.want)
		}
	}
	if got := level(Critical, 0, 0); got != Warn {
		t.Errorf("unknown total: %v, want the signal capped at warn", got)
	}
}

func TestFreed(t *testing.T) {
	info, err := Linux{Root: fakeRoot(t, map[string]string{
		"proc/meminfo":         meminfoGiB(24, 2),
		"proc/pressure/memory": psi3([3]float64{30, 30, 30}, [3]float64{30, 30, 30}),
	})}.Read()
	if err != nil || info.Pressure != Critical {
		t.Fatalf("%v %v", info, err)
	}
	if got := info.Freed(0); got != info {
		t.Errorf("Freed(0) changed the reading: %v", got)
	}
	after := info.Freed(6 * gib)
	if after.Available != 8*gib || after.Pressure != Warn {
		t.Errorf("6 GiB freed: %v, want 8 GiB available at warn", after)
	}
	if after := info.Freed(40 * gib); after.Available != 24*gib || after.Pressure != Normal {
		t.Errorf("more than the machine freed: %v", after)
	}
	// A fixed reading's pressure is its signal: freeing weighs it again, never raises it.
	f, _ := Fixed{Total: 64 * gib, Available: 40 * gib, Pressure: Critical}.Read()
	if f.Pressure != Critical || f.Freed(gib).Pressure != Normal {
		t.Errorf("fixed critical reading: %v, freed %v", f, f.Freed(gib))
	}
	f, _ = Fixed{Total: 64 * gib, Available: 40 * gib}.Read()
	if f.Freed(gib).Pressure != Normal {
		t.Errorf("freeing raised the level: %v", f.Freed(gib))
	}
}

func TestNoSignal(t *testing.T) {
	s := NoSignal{Fixed{Total: 24 * gib, Available: 8 * gib, Signal: Critical, Pressure: Warn}}
	info, err := s.Read()
	if err != nil || info.Pressure != Normal || info.Signal != Normal || !strings.Contains(info.Source, "signal off") {
		t.Errorf("%v %v", info, err)
	}
	t.Setenv("MLXG_MEMORY_SIGNAL", "off")
	if _, ok := System().(NoSignal); !ok {
		t.Errorf("MLXG_MEMORY_SIGNAL=off: System is %T", System())
	}
	t.Setenv("MLXG_MEMORY_SIGNAL", "")
	if _, ok := System().(NoSignal); ok {
		t.Error("System ignores the signal by default")
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/end\04`: `/end\04`} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
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
		"missing meminfo":  {},
		"no MemTotal":      {"proc/meminfo": "MemFree: 10 kB\n"},
		"bad number":       {"proc/meminfo": "MemTotal: lots kB\n"},
		"bad psi":          {"proc/meminfo": meminfo, "proc/pressure/memory": "some avg10=x\n"},
		"psi without avgs": {"proc/meminfo": meminfo, "proc/pressure/memory": "some total=1\n"},
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
	const page = 16384
	// free_count already holds the speculative pages: they are not added again.
	vm := vmStatistics64{FreeCount: 1000, InactiveCount: 3000, PurgeableCount: 400, SpeculativeCount: 200, WireCount: 500, CompressorPageCount: 70}
	info := darwinInfo(1<<30, 2, vm, page, 4<<30, 1<<30)
	if info.Available != 4400*page || info.Wired != 500*page || info.Compressed != 70*page || info.Signal != Warn {
		t.Errorf("got %+v", info)
	}
	if info.SwapTotal != 4<<30 || info.SwapUsed != 1<<30 {
		t.Errorf("swap %d of %d", info.SwapUsed, info.SwapTotal)
	}
	for level, want := range map[uint32]Pressure{0: Normal, 1: Normal, 2: Warn, 4: Critical} {
		if got := darwinPressure(level); got != want {
			t.Errorf("level %d: got %v want %v", level, got, want)
		}
	}
	// Available never exceeds what is not wired.
	if got := darwinInfo(600*page, 1, vm, page, 0, 0).Available; got != 100*page {
		t.Errorf("available %d pages, want the 100 not wired", got/page)
	}
	if got := darwinInfo(400*page, 1, vm, page, 0, 0).Available; got != 0 {
		t.Errorf("available %d with more wired than the machine", got)
	}
}

// TestDarwinLevel: the kernel's level weighed against free + inactive + purgeable.
func TestDarwinLevel(t *testing.T) {
	const page = 16384
	total := uint64(1_000_000) * page
	at := func(availShare float64) vmStatistics64 {
		n := uint32(availShare * 1_000_000)
		return vmStatistics64{FreeCount: n / 4, InactiveCount: n / 2, PurgeableCount: n - n/4 - n/2, WireCount: 100_000}
	}
	cases := []struct {
		kernel uint32
		avail  float64
		want   Pressure
	}{
		{1, 0.70, Normal},
		{4, 0.70, Normal}, // critical from the kernel with most memory free or inactive: a passing state
		{2, 0.70, Normal},
		{2, 0.30, Warn},
		{4, 0.30, Warn}, // the kernel's critical counts, but not as a refusal while a third is available
		{1, 0.30, Normal},
		{1, 0.08, Warn},
		{4, 0.08, Critical},
		{1, 0.02, Critical},
	}
	for _, c := range cases {
		info := darwinInfo(total, c.kernel, at(c.avail), page, 0, 0)
		if info.Pressure != c.want {
			t.Errorf("kernel level %d, %.0f%% available: %v, want %v", c.kernel, 100*c.avail, info.Pressure, c.want)
		}
	}
	// Unloading a model re-weighs the kernel's level with the memory it frees.
	info := darwinInfo(total, 4, at(0.08), page, 0, 0)
	if got := info.Freed(total / 2).Pressure; got != Normal {
		t.Errorf("after freeing half the machine: %v", got)
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
