package sysmem

import (
	"encoding/binary"
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"golang.org/x/sys/unix"
)

const hostVMInfo64 = 4 // HOST_VM_INFO64 flavor

type darwin struct{}

func systemSensor() Sensor { return darwin{} }

var (
	libOnce          sync.Once
	libErr           error
	machHostSelf     func() uint32
	hostStatistics64 func(host uint32, flavor int32, info unsafe.Pointer, count unsafe.Pointer) int32
)

func loadLibSystem() error {
	libOnce.Do(func() {
		lib, err := purego.Dlopen("/usr/lib/libSystem.B.dylib", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			libErr = fmt.Errorf("loading libSystem for host_statistics64: %w", err)
			return
		}
		purego.RegisterLibFunc(&machHostSelf, lib, "mach_host_self")
		purego.RegisterLibFunc(&hostStatistics64, lib, "host_statistics64")
	})
	return libErr
}

// Read implements Sensor.
func (darwin) Read() (Info, error) {
	total, err := unix.SysctlUint64("hw.memsize")
	if err != nil {
		return Info{}, fmt.Errorf("sysctl hw.memsize: %w", err)
	}
	kernelLevel, err := unix.SysctlUint32("kern.memorystatus_vm_pressure_level")
	if err != nil {
		return Info{}, fmt.Errorf("sysctl kern.memorystatus_vm_pressure_level: %w", err)
	}
	if err := loadLibSystem(); err != nil {
		return Info{}, err
	}
	var vm vmStatistics64
	count := uint32(hostVMInfo64Count)
	if kr := hostStatistics64(machHostSelf(), hostVMInfo64, unsafe.Pointer(&vm), unsafe.Pointer(&count)); kr != 0 {
		return Info{}, fmt.Errorf("host_statistics64(HOST_VM_INFO64) failed with kern_return_t %d", kr)
	}
	var swapTotal, swapUsed uint64
	// struct xsw_usage { u_int64_t xsu_total, xsu_avail, xsu_used; u_int32_t xsu_pagesize; boolean_t xsu_encrypted; }
	if raw, err := unix.SysctlRaw("vm.swapusage"); err == nil && len(raw) >= 24 {
		swapTotal = binary.LittleEndian.Uint64(raw[0:])
		swapUsed = binary.LittleEndian.Uint64(raw[16:])
	}
	return darwinInfo(total, kernelLevel, vm, uint64(unix.Getpagesize()), swapTotal, swapUsed), nil
}
