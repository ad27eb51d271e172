package main

import (
	"sync"
	"time"
)

// sumWords is the streaming-read kernel: it reads every word of p once. Eight independent
// accumulators keep several loads in flight, so one core is limited by memory, not by the
// dependency chain of a single sum.
func sumWords(p []uint64) uint64 {
	var s0, s1, s2, s3, s4, s5, s6, s7 uint64
	i := 0
	for ; i+8 <= len(p); i += 8 {
		q := p[i : i+8 : i+8]
		s0 += q[0]
		s1 += q[1]
		s2 += q[2]
		s3 += q[3]
		s4 += q[4]
		s5 += q[5]
		s6 += q[6]
		s7 += q[7]
	}
	for ; i < len(p); i++ {
		s0 += p[i]
	}
	return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
}

// parallelSum splits p into threads contiguous parts read at once and returns their sum.
func parallelSum(p []uint64, threads int) uint64 {
	threads = max(1, min(threads, len(p)))
	sums := make([]uint64, threads)
	var wg sync.WaitGroup
	for t := range threads {
		lo, hi := len(p)*t/threads, len(p)*(t+1)/threads
		wg.Go(func() { sums[t] = sumWords(p[lo:hi]) })
	}
	wg.Wait()
	var s uint64
	for _, v := range sums {
		s += v
	}
	return s
}

// sink keeps the kernel's result alive so the reads cannot be optimised away.
var sink uint64

// MeasureBandwidth reads a buffer of size bytes with threads goroutines, passes times, and
// returns the best rate in bytes per second. The buffer must be much larger than the
// last-level cache for the rate to be the memory's.
func MeasureBandwidth(size int64, threads, passes int) float64 {
	p := make([]uint64, size/8)
	for i := range p { // touch every page, with values the kernel cannot predict
		p[i] = uint64(i) * 0x9E3779B97F4A7C15
	}
	best := 0.0
	for range max(1, passes) {
		t0 := time.Now()
		sink += parallelSum(p, threads)
		if r := float64(len(p)*8) / time.Since(t0).Seconds(); r > best {
			best = r
		}
	}
	return best
}

// Ceiling is the decode rate memory bandwidth allows: every weight byte a token needs is read
// once per token, so tokens/s <= bandwidth / bytes per token. Zero inputs give 0.
func Ceiling(bandwidth float64, bytesPerToken int64) float64 {
	if bandwidth <= 0 || bytesPerToken <= 0 {
		return 0
	}
	return bandwidth / float64(bytesPerToken)
}
