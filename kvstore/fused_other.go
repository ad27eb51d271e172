//go:build !amd64

package kvstore

// attendFused has no kernels on this architecture: attention dequantizes tile by tile.
func attendFused(t tiler, s *scratch, a Attention, st *state, length, h, r0, r1, b0, b1 int) bool {
	return false
}

// groupKernels is the amd64 switch of the group kernels, here only so that the
// benchmarks build: this architecture has no fused kernels of either kind.
var groupKernels = false

// scaleMax multiplies the scores sc by scale and returns the larger of mx and their maximum.
func scaleMax(sc []float32, scale, mx float32) float32 {
	for i := range sc {
		sc[i] *= scale
		mx = max(mx, sc[i])
	}
	return mx
}

// expSum replaces the scores sc by e^(score-mx) and returns their sum.
func expSum(sc []float32, mx float32) float32 {
	var s float32
	for i := range sc {
		sc[i] = expNeg(sc[i] - mx)
		s += sc[i]
	}
	return s
}
