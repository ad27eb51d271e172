//go:build unix

package residency

import "golang.org/x/sys/unix"

// allocBuf maps n bytes of anonymous memory: freeBuf gives them back to the system at
// once, where a Go slice would wait for the collector and its scavenger.
func allocBuf(n int) ([]byte, error) {
	if n == 0 {
		return []byte{}, nil
	}
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
}

func freeBuf(b []byte) {
	if cap(b) > 0 {
		unix.Munmap(b[:cap(b)])
	}
}
