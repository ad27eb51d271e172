//go:build unix && !linux

package residency

import (
	"errors"
	"io"
	"os"
)

// openUncached opens path with caching off (F_NOCACHE on macOS): reads go to the
// manager's buffer without a second copy in the unified buffer cache.
func openUncached(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	setNoCache(f)
	return f, nil
}

// directAlign 0: no direct reads here (macOS reads with F_NOCACHE instead).
const directAlign = 0

func openDirect(string) (*os.File, error) { return nil, errors.ErrUnsupported }

func readDirect(*os.File, []byte, int64, int) (int, error) { return 0, nil }

func readRange(f *os.File, buf []byte, off int64) error {
	if len(buf) == 0 {
		return nil
	}
	_, err := f.ReadAt(buf, off)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// DropCache is a no-op where posix_fadvise is missing.
func DropCache(path string, off, n int64) error { return nil }
