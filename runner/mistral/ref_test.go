package mistral_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// The fixtures in testdata are written by testdata/ref.py on a machine with torch and
// transformers: tiny random mistral, ministral3 and mistral3 checkpoints (the last in
// transformers 5's layout, with a vision tower) made with save_pretrained in float32, and
// per case and variant transformers' last-position logits of a prompt longer than the
// sliding window and the query scale's period, and its greedy continuation decoded through
// the cache, in float64. The quantized variants' references run transformers on the
// weights `mlxg create` quantizes, quantized and dequantized by ref.py as internal/quant
// does.

// TestLogitsAgainstTransformers converts every case with create (f32, q4 and q8 in
// groups of 32) and checks it against transformers (modeltest.CheckRef).
func TestLogitsAgainstTransformers(t *testing.T) {
	for _, c := range modeltest.ReadRefs(t, "runner/mistral/testdata/ref.py") {
		for _, v := range []struct {
			name string
			opts create.Options
		}{{"f32", create.Options{}}, {"q4", create.Options{Bits: 4, GroupSize: 32}}, {"q8", create.Options{Bits: 8, GroupSize: 32}}} {
			ref, ok := c.Variants[v.name]
			if !ok {
				t.Fatalf("%s: no reference for %s", c.Name, v.name)
			}
			t.Run(c.Name+"/"+v.name, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "mlx")
				if _, err := create.Convert(context.Background(), filepath.Join("testdata", c.Name), dir, v.opts); err != nil {
					t.Fatal(err)
				}
				m, err := model.Load(dir, cpu.New(2))
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				modeltest.CheckRef(t, m, c.Prompt, ref)
			})
		}
	}
}
