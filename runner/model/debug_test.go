package model_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/registry/randmodel"
)

func TestDebugQ(t *testing.T) {
	for _, tied := range []bool{false, true} {
		for _, arch := range []string{"qwen2"} {
			cfg := randmodel.Tiny(arch, 512)
			cfg.TieWordEmbeddings = tied
			dir := generate(t, cfg)
			qdir, fdir := filepath.Join(t.TempDir(), "q"), filepath.Join(t.TempDir(), "f")
			quantizeDir(t, dir, qdir, fdir, 4, 32)
			qm, fm := load(t, qdir), load(t, fdir)
			for _, n := range []int{1, 12} {
				qc, _ := qm.NewCaches(true)
				fc, _ := fm.NewCaches(true)
				ql, _ := qm.Forward(context.Background(), prompt[:n], qc, true)
				fl, _ := fm.Forward(context.Background(), prompt[:n], fc, true)
				t.Logf("%s tied=%v n=%d diff %g", arch, tied, n, maxDiff(ql, fl))
			}
		}
	}
}
