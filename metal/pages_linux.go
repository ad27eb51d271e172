package metal

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dropPages tells the kernel the whole pages of [p, p+n) are not needed any more: MLX
// has copied a tensor out of the checkpoint's mmap (its CPU backend copies everything
// it is given), and the file pages that copy read would otherwise stay in the
// process's resident set beside the copy. A later read faults them in again from the
// file, so this never loses data.
func dropPages(p unsafe.Pointer, n int) {
	page := uintptr(os.Getpagesize())
	start := (uintptr(p) + page - 1) &^ (page - 1)
	end := (uintptr(p) + uintptr(n)) &^ (page - 1)
	if end <= start {
		return
	}
	first := unsafe.Add(p, int(start-uintptr(p)))
	_ = unix.Madvise(unsafe.Slice((*byte)(first), end-start), unix.MADV_DONTNEED)
}
