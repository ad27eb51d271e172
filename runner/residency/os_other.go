//go:build !unix

package residency

import (
	"errors"
	"io"
	"os"
)

func allocBuf(n int) ([]byte, error) { return make([]byte, n), nil }

func freeBuf([]byte) {}

func openUncached(path string) (*os.File, error) { return os.Open(path) }

// directAlign 0: no direct reads here (macOS reads with F_NOCACHE instead).
const directAlign = 0

func openDirect(string) (*os.File, error) { return nil, errors.ErrUnsupported }

func readDirect(*os.File, []byte, int64, int) (int, error) { return 0, nil }

func readRange(f *os.File, buf []byte, off int64) error {
	_, err := f.ReadAt(buf, off)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// DropCache is a no-op where posix_fadvise is missing.
func DropCache(path string, off, n int64) error { return nil }
