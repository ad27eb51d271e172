package gemma4_test

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// TestCreateGemma4Vision: `mlxg create` of a multimodal Gemma 4 in transformers' layout keeps
// the tower under vision_tower.* and the projector under embed_vision.* byte for byte as
// mlx-vlm's layout holds them, also with --quantize 4 (both kept in float), and the
// converted checkpoint encodes an image as the one written in mlx-vlm's layout does.
func TestCreateGemma4Vision(t *testing.T) {
	dir := t.TempDir()
	hf, mlx := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	v := randmodel.TinyGemma4Vision()
	v.Clipped = true // the clipped linears' bounds are kept too
	for i, d := range []string{hf, mlx} {
		if err := randmodel.Generate(d, visionText(), randmodel.Options{Seed: 7}); err != nil {
			t.Fatal(err)
		}
		if err := randmodel.AddGemma4Vision(d, v, 11, i == 0); err != nil {
			t.Fatal(err)
		}
	}
	want, err := safetensors.OpenDir(mlx)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	img := testImage(30, 22, 1)
	ref := loadVision(t, mlx)
	sp, err := ref.EncodeImages(context.Background(), []vision.Image{img})
	if err != nil {
		t.Fatal(err)
	}
	for _, bits := range []int{0, 4} {
		out := filepath.Join(dir, "out", string(rune('0'+bits)))
		if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: bits, GroupSize: 32}); err != nil {
			t.Fatal(err)
		}
		got, err := safetensors.OpenDir(out)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, name := range want.Names() {
			if !strings.HasPrefix(name, "vision_tower.") && !strings.HasPrefix(name, "embed_vision.") {
				continue
			}
			n++
			w, _ := want.Tensor(name)
			g, ok := got.Tensor(name)
			switch {
			case !ok:
				t.Errorf("%d bits: no %s in the converted checkpoint", bits, name)
			case !slices.Equal(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data):
				t.Errorf("%d bits: %s is %v, mlx-vlm's layout %v (or its bytes differ)", bits, name, g.Shape, w.Shape)
			}
		}
		got.Close()
		if n == 0 {
			t.Fatal("no tower tensors compared")
		}
		m, err := model.Load(out, cpu.New(2))
		if err != nil {
			t.Fatal(err)
		}
		if m.Vision() == nil || !model.HasVision(out) {
			m.Close()
			t.Fatalf("%d bits: the converted tower was not loaded", bits)
		}
		f, err := m.EncodeImages(context.Background(), []vision.Image{img})
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(f[0].Rows, sp[0].Rows) {
			t.Errorf("%d bits: features differ from mlx-vlm's layout's", bits)
		}
	}
}
