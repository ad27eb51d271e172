//go:build !linux

package main

// treePeakRSS is unknown here: peak memory reads from Linux's /proc.
func treePeakRSS(root int) int64 { return 0 }
