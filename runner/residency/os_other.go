//go:build !unix

package residency

import (
	"io"
	"os"
)

func allocBuf(n int) ([]byte, error) { return make([]byte, n), nil }

func freeBuf([]byte) {}

func openUncached(path string) (*os.File, error) { return os.Open(path) }

func readRange(f *os.File, buf []byte, off int64) error {
	_, err := f.ReadAt(buf, off)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// DropCache is a no-op where posix_fadvise is missing.
func DropCache(path string, off, n int64) error { return nil }
