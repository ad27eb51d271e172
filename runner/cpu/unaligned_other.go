//go:build !amd64 && !arm64

package cpu

// ReadsMisaligned is false where an unaligned load may fault or be emulated by the kernel
// (and where no assembly kernel runs): there view copies a misaligned tensor into an
// aligned slice of its own, and CopiedWeightBytes counts it. See unaligned.go.
const ReadsMisaligned = false
