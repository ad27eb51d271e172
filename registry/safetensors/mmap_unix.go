//go:build unix

package safetensors

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func mapFile(path string) ([]byte, func() error, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if st.Size() == 0 {
		return nil, nil, fmt.Errorf("safetensors %s: %w", path, errEmpty)
	}
	if st.Size() != int64(int(st.Size())) {
		return nil, nil, fmt.Errorf("safetensors %s: file too large to map", path)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("safetensors %s: mmap: %w", path, err)
	}
	return data, func() error { return unix.Munmap(data) }, nil
}
