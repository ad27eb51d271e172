package modeltest

import (
	"testing"
)

// CheckEncodeBound checks a tower's pass on MLX against the memory plan: MLX's peak
// (peak bytes above the weights, mlxtest.EncodePeak) is within the estimate of the backend's
// arrays (buffers, the family's encodeBuffers, which the CPU backend's own count is held
// to), so within the plan's encode peak (encode: buffers and what the host holds beside
// them), and the plan's figure is not more than loose times the peak. It logs both ratios.
func CheckEncodeBound(t *testing.T, what string, peak, buffers, encode int64, loose float64) {
	t.Helper()
	if peak <= 0 {
		t.Fatalf("%s: MLX's peak rose by %d bytes over the pass", what, peak)
	}
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	r := float64(encode) / float64(peak)
	t.Logf("%s: MLX's peak above the weights %.2f MiB; estimated %.2f MiB of arrays (%.2f×), %.2f MiB with the host's (%.2f×)",
		what, mib(peak), mib(buffers), float64(buffers)/float64(peak), mib(encode), r)
	if buffers < peak {
		t.Errorf("%s: the estimate of the backend's arrays, %d bytes, is below MLX's peak of %d", what, buffers, peak)
	}
	if encode < buffers {
		t.Errorf("%s: the plan's encode peak %d is below its arrays' part %d", what, encode, buffers)
	}
	if r > loose {
		t.Errorf("%s: the plan's encode peak %d bytes is %.2f times MLX's peak of %d (over %.1f×)", what, encode, r, peak, loose)
	}
}
