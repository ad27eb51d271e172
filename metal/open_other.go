//go:build !((darwin && arm64) || (linux && (amd64 || arm64) && !nomlx))

package metal

import (
	"fmt"
	"runtime"
)

// open never looks for libmlxc here: MLX runs on the GPU of Apple Silicon, and this
// project loads it elsewhere only on Linux amd64/arm64 (without the nomlx tag); purego is
// kept out of this platform's binary.
func open() (*Lib, error) {
	return nil, &UnavailableError{Reason: fmt.Errorf("%w (this is %s/%s)", ErrUnsupportedPlatform, runtime.GOOS, runtime.GOARCH)}
}
