//go:build !unix

package safetensors

import (
	"fmt"
	"os"
)

// mapFile reads the whole file where mmap is not available.
func mapFile(path string) ([]byte, func() error, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if len(data) == 0 {
		return nil, nil, fmt.Errorf("safetensors %s: %w", path, errEmpty)
	}
	return data, func() error { return nil }, nil
}
