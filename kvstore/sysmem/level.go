package sysmem

// How a reading becomes a level, on every platform: what is available decides, and the
// operating system's own signal (Info.Signal) only adds to it where memory is not
// plentiful. A stall or a kernel hint on a machine with most of its memory free is
// somebody else's burst, not a reason to refuse or shrink a load.
//
//	available < max(4% of total, 256 MiB)   critical
//	available < 10% of total                 warn
//	available ≥ 50% of total                 the signal is ignored
//	otherwise                                the signal counts, but only up to warn
//	                                         (it reaches critical only below 10%)
const (
	availCriticalShare  = 0.04
	availCriticalFloor  = 256 << 20
	availWarnShare      = 0.10
	availPlentifulShare = 0.50
)

// level combines the OS's signal with the available memory.
func level(signal Pressure, avail, total uint64) Pressure {
	if total == 0 {
		return min(signal, Warn) // nothing to weigh the signal against
	}
	a, t := float64(avail), float64(total)
	fromAvail := Normal
	switch {
	case a < max(availCriticalShare*t, availCriticalFloor):
		fromAvail = Critical
	case a < availWarnShare*t:
		fromAvail = Warn
	}
	switch {
	case a >= availPlentifulShare*t:
		signal = Normal
	case fromAvail == Normal:
		signal = min(signal, Warn)
	}
	return max(fromAvail, signal)
}
