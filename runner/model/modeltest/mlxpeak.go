package modeltest

import (
	"context"
	"testing"

	"github.com/mlxg/mlxg/metal"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// EncodePeakOnMLX loads the checkpoint in dir on a fresh MLX backend (an installed libmlxc;
// it skips without one, as mlxtest.Lib does), encodes warm once (so that whatever MLX makes
// of the weights on their first use is made), then encodes img alone and returns the most
// MLX's allocator held during that pass above what it held before it: the weights and the
// warm pass's leftovers aside, the pass's own arrays. MLX's counters are the process's, so
// nothing else may run on MLX meanwhile (tests of a package run one at a time unless they
// call t.Parallel).
func EncodePeakOnMLX(t *testing.T, dir string, warm, img vision.Image) int64 {
	t.Helper()
	lib := mlxtest.Lib(t)
	b, err := metal.NewBackend(lib)
	if err != nil {
		t.Fatalf("starting the MLX backend: %v", err)
	}
	m, err := model.Load(dir, b)
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	defer b.Close()
	defer m.Close()
	if m.Vision() == nil {
		t.Fatal("the checkpoint's tower was not bound on MLX")
	}
	encode := func(im vision.Image) {
		if _, err := m.EncodeImages(context.Background(), []vision.Image{im}); err != nil {
			t.Fatalf("encoding on MLX: %v", err)
		}
	}
	encode(warm)
	before, err := b.Memory()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ResetPeakMemory(); err != nil {
		t.Fatal(err)
	}
	encode(img)
	after, err := b.Memory()
	if err != nil {
		t.Fatal(err)
	}
	if after.Peak < before.Active {
		t.Fatalf("MLX's peak %d is below what it held before the pass (%d): the peak was not reset", after.Peak, before.Active)
	}
	return int64(after.Peak - before.Active)
}

// CheckEncodeBound checks a tower's pass on MLX against the memory plan: MLX's peak
// (peak bytes above the weights, EncodePeakOnMLX) is within the estimate of the backend's
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
