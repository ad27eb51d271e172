package mlxtest

import (
	"context"
	"testing"

	"github.com/mlxg/mlxg/metal"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// EncodePeak loads the checkpoint in dir on a fresh MLX backend (an installed libmlxc;
// it skips without one, as Lib does), encodes warm once (so that whatever MLX makes
// of the weights on their first use is made), then encodes img alone and returns the most
// MLX's allocator held during that pass above what it held before it: the weights and the
// warm pass's leftovers aside, the pass's own arrays. MLX's counters are the process's, so
// nothing else may run on MLX meanwhile (tests of a package run one at a time unless they
// call t.Parallel).
func EncodePeak(t *testing.T, dir string, warm, img vision.Image) int64 {
	t.Helper()
	lib := Lib(t)
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
