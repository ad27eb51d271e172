//go:build !amd64

package kvstore

// attendFused has no kernels on this architecture: attention dequantizes tile by tile.
func attendFused(t tiler, s *scratch, a Attention, st *state, length, h, r0, r1, b0, b1 int) bool {
	return false
}
