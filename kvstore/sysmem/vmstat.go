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

// darwinAvailable is the memory the kernel hands out without compressing or swapping:
// free pages (host_statistics64 counts the speculative ones in free_count, so they are
// not added again), inactive pages, and purgeable pages (volatile caches the kernel may
// drop at once). Purgeable pages also sit on the active and inactive queues, so the sum
// is capped at what is not wired.
func darwinAvailable(total uint64, vm vmStatistics64, pageSize uint64) uint64 {
	avail := (uint64(vm.FreeCount) + uint64(vm.InactiveCount) + uint64(vm.PurgeableCount)) * pageSize
	wired := uint64(vm.WireCount) * pageSize
	return min(avail, total-min(wired, total))
}

// darwinInfo combines the readings. The kernel's level is the Signal, weighed against the
// available memory as on every platform (level.go): a critical kernel level counts as
// normal while half the memory is available, as warn while a tenth is, as critical below
// that. Swap is reported, not weighed: macOS grows its swap files on demand, so a swap
// that looks nearly full is the usual state, not a sign of pressure.
func darwinInfo(total uint64, kernelLevel uint32, vm vmStatistics64, pageSize uint64, swapTotal, swapUsed uint64) Info {
	i := Info{
		Total:      total,
		Available:  darwinAvailable(total, vm, pageSize),
		Wired:      uint64(vm.WireCount) * pageSize,
		Compressed: uint64(vm.CompressorPageCount) * pageSize,
		SwapTotal:  swapTotal,
		SwapUsed:   swapUsed,
		Signal:     darwinPressure(kernelLevel),
		Source:     "darwin sysctl+host_statistics64",
	}
	i.Pressure = level(i.Signal, i.Available, i.Total)
	return i
}
