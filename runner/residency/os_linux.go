package residency

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

func openUncached(path string) (*os.File, error) { return os.Open(path) }

// directAlign is the alignment of a direct read's file offset, length and buffer: a
// page, a multiple of the logical block size of the disks in use.
const directAlign = 4096

// openDirect opens path for O_DIRECT reads, which go from the disk to the manager's
// buffer without passing through the page cache: no copy, and no cached pages to
// allocate and drop again, a fair share of a reading core's time otherwise.
func openDirect(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// readDirect reads the aligned range at off into buf (aligned, a multiple of
// directAlign long) with O_DIRECT and returns the bytes read; the file may end before
// buf does, not before need bytes. 0 with a nil error: the file system refused the
// read (EINVAL), read it another way.
func readDirect(f *os.File, buf []byte, off int64, need int) (int, error) {
	got := 0
	for got < need {
		n, err := unix.Pread(int(f.Fd()), buf[got:], off+int64(got))
		if err == unix.EINTR {
			continue
		}
		if errors.Is(err, unix.EINVAL) && got == 0 {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return 0, io.ErrUnexpectedEOF
		}
		got += n
	}
	return got, nil
}

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
