//go:build amd64 || arm64

package cpu

// ReadsMisaligned reports whether the backend reads a quantized weight's codes, scales and
// biases in place from the checkpoint's mapping even where the file stores them at an
// offset not aligned for their element type (view). On amd64 and arm64 it does: both
// load a uint16, uint32 or float32 from any address (arm64 faults only on device memory,
// never a mapped file, and only for atomics and exclusives elsewhere, which nothing does to
// weights); every assembly kernel reads weights with unaligned vector loads (VMOVDQU,
// VMOVUPS, VEX and EVEX memory operands; NEON's VLD1 and LDP); and Go's checkptr (on under
// -race) accepts misaligned pointers to pointer-free elements. A misaligned element may
// straddle a cache line, which costs a little on the few loads that do; it is the same
// bytes as an aligned copy would hold, so products are bit for bit the same.
const ReadsMisaligned = true
