//go:build !(darwin && arm64)

package metal

import (
	"fmt"
	"runtime"
)

// open never looks for libmlxc here: MLX's Metal backend needs Apple Silicon, and
// purego is kept out of this platform's binary.
func open() (*Lib, error) {
	return nil, &UnavailableError{Reason: fmt.Errorf("%w (this is %s/%s)", ErrUnsupportedPlatform, runtime.GOOS, runtime.GOARCH)}
}
