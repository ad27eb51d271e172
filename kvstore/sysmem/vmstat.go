package sysmem

// vmStatistics64 mirrors darwin's struct vm_statistics64 (mach/vm_statistics.h), which
// host_statistics64(HOST_VM_INFO64) fills. Go's natural alignment reproduces the C
// layout (152 bytes, 38 integer_t words = HOST_VM_INFO64_COUNT). It lives in an untagged
// file so that the arithmetic on it is tested on every platform.
type vmStatistics64 struct {
	FreeCount                          uint32 // includes speculative pages
	ActiveCount                        uint32
	InactiveCount                      uint32
	WireCount                          uint32
	ZeroFillCount                      uint64
	Reactivations                      uint64
	Pageins                            uint64
	Pageouts                           uint64
	Faults                             uint64
	CowFaults                          uint64
	Lookups                            uint64
	Hits                               uint64
	Purges                             uint64
	PurgeableCount                     uint32
	SpeculativeCount                   uint32
	Decompressions                     uint64
	Compressions                       uint64
	Swapins                            uint64
	Swapouts                           uint64
	CompressorPageCount                uint32
	ThrottledCount                     uint32
	ExternalPageCount                  uint32
	InternalPageCount                  uint32
	TotalUncompressedPagesInCompressor uint64
}

const hostVMInfo64Count = 38 // HOST_VM_INFO64_COUNT

// darwinPressure maps kern.memorystatus_vm_pressure_level (the kernel's
// DISPATCH_MEMORYPRESSURE_NORMAL=1, WARN=2, CRITICAL=4) to a Pressure.
func darwinPressure(level uint32) Pressure {
	switch {
	case level >= 4:
		return Critical
	case level >= 2:
		return Warn
	}
	return Normal
}

// darwinInfo combines the readings: available memory is free (which counts speculative
// pages) plus inactive pages, which the kernel reclaims without swapping, as Activity
// Monitor and gopsutil count it.
func darwinInfo(total uint64, level uint32, vm vmStatistics64, pageSize uint64, swapTotal, swapUsed uint64) Info {
	return Info{
		Total:      total,
		Available:  min(total, (uint64(vm.FreeCount)+uint64(vm.InactiveCount))*pageSize),
		Wired:      uint64(vm.WireCount) * pageSize,
		Compressed: uint64(vm.CompressorPageCount) * pageSize,
		SwapTotal:  swapTotal,
		SwapUsed:   swapUsed,
		Pressure:   darwinPressure(level),
		Source:     "darwin sysctl+host_statistics64",
	}
}
