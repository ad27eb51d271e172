package residency

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

func openUncached(path string) (*os.File, error) { return os.Open(path) }

// readRange preads the range and then drops it from the page cache: the manager's
// buffer is the one copy kept, and pages the cache held would be charged to the process
// (its memory cgroup) on top of it.
func readRange(f *os.File, buf []byte, off int64) error {
	if len(buf) == 0 {
		return nil
	}
	_, err := f.ReadAt(buf, off)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	unix.Fadvise(int(f.Fd()), off, int64(len(buf)), unix.FADV_DONTNEED)
	return err
}

// DropCache asks the kernel to drop the file range from the page cache (pages mapped
// by a process stay until it unmaps them).
func DropCache(path string, off, n int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fadvise(int(f.Fd()), off, n, unix.FADV_DONTNEED)
}
