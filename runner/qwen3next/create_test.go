package qwen3next_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// hfQwen35 rewrites a Hugging Face Qwen3-Next checkpoint as the Hugging Face Qwen3.5/3.6
// checkpoint of the same weights: model.language_model.* keys, separate
// in_proj_qkv/z/b/a, fused experts.gate_up_proj and experts.down_proj, a text_config,
// plus a vision tower tensor and an mtp tensor that conversion must drop.
func hfQwen35(t *testing.T, src, dst string, c randmodel.Config) {
	t.Helper()
	ck, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	nk, nv, dk, dv, E := c.LinearKHeads, c.LinearVHeads, c.LinearKHeadDim, c.LinearVHeadDim, c.NumExperts
	r := nv / nk
	rows := func(name string) [][]byte {
		tt, _ := ck.Tensor(name)
		w := len(tt.Data) / tt.Shape[0]
		out := make([][]byte, tt.Shape[0])
		for i := range out {
			out[i] = tt.Data[i*w : (i+1)*w]
		}
		return out
	}
	var ts []safetensors.Tensor
	put := func(name string, shape []int, parts ...[][]byte) {
		var data []byte
		for _, p := range parts {
			for _, row := range p {
				data = append(data, row...)
			}
		}
		ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: safetensors.F32, Shape: shape}, Data: data})
	}
	h := c.HiddenSize
	for _, name := range ck.Names() {
		tt, _ := ck.Tensor(name)
		out := name
		if strings.HasPrefix(name, "model.") {
			out = "model.language_model." + strings.TrimPrefix(name, "model.")
		}
		switch {
		case strings.Contains(name, ".mlp.experts."):
			if !strings.HasSuffix(name, ".mlp.experts.0.gate_proj.weight") {
				continue
			}
			base := strings.TrimSuffix(out, ".0.gate_proj.weight")
			src := strings.TrimSuffix(name, "0.gate_proj.weight")
			var gu, down [][][]byte
			for e := range E {
				gu = append(gu, rows(fmt.Sprintf("%s%d.gate_proj.weight", src, e)), rows(fmt.Sprintf("%s%d.up_proj.weight", src, e)))
				down = append(down, rows(fmt.Sprintf("%s%d.down_proj.weight", src, e)))
			}
			put(base+".gate_up_proj", []int{E, 2 * c.MoEIntermediate, h}, gu...)
			put(base+".down_proj", []int{E, h, c.MoEIntermediate}, down...)
		case strings.HasSuffix(name, "in_proj_qkvz.weight"):
			all := rows(name)
			var q, k, v, z [][]byte
			per := 2*dk + 2*r*dv
			for g := 0; g < nk; g++ {
				grp := all[g*per : (g+1)*per]
				q, k = append(q, grp[:dk]...), append(k, grp[dk:2*dk]...)
				v, z = append(v, grp[2*dk:2*dk+r*dv]...), append(z, grp[2*dk+r*dv:]...)
			}
			base := strings.TrimSuffix(out, "in_proj_qkvz.weight")
			put(base+"in_proj_qkv.weight", []int{2*nk*dk + nv*dv, h}, q, k, v)
			put(base+"in_proj_z.weight", []int{nv * dv, h}, z)
		case strings.HasSuffix(name, "in_proj_ba.weight"):
			all := rows(name)
			var b, a [][]byte
			for g := 0; g < nk; g++ {
				b, a = append(b, all[g*2*r:g*2*r+r]...), append(a, all[g*2*r+r:(g+1)*2*r]...)
			}
			base := strings.TrimSuffix(out, "in_proj_ba.weight")
			put(base+"in_proj_b.weight", []int{nv, h}, b)
			put(base+"in_proj_a.weight", []int{nv, h}, a)
		default:
			ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: out, DType: tt.DType, Shape: tt.Shape}, Data: tt.Data})
		}
	}
	put("mtp.fc.weight", []int{2, 2}, [][]byte{make([]byte, 8), make([]byte, 8)})
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Write(filepath.Join(dst, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	text := c.HFConfig()
	text["model_type"] = "qwen3_5_moe_text"
	cfg, _ := json.Marshal(map[string]any{"model_type": "qwen3_5_moe", "architectures": []string{"Qwen3_5MoeForConditionalGeneration"},
		"text_config": text, "torch_dtype": "float32"})
	if err := os.WriteFile(filepath.Join(dst, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCreateQwen35: `mlxg create` of a Hugging Face Qwen3.5/3.6 MoE checkpoint (float
// and 4-bit with the 8-bit router overrides) gives the logits of the same weights
// converted from Qwen3-Next's layout.
func TestCreateQwen35(t *testing.T) {
	dir := t.TempDir()
	c := randmodel.TinyQwen3Next(256)
	next, q35 := filepath.Join(dir, "next-hf"), filepath.Join(dir, "q35-hf")
	if err := randmodel.Generate(next, c, randmodel.Options{Seed: 5}); err != nil {
		t.Fatal(err)
	}
	hfQwen35(t, next, q35, c)
	// A vision tower in Hugging Face's layout, and the same in mlx-vlm's.
	if err := randmodel.AddQwenVisionHF(q35, randmodel.TinyQwenVision(), 7); err != nil {
		t.Fatal(err)
	}
	mlxTower := filepath.Join(dir, "tower-mlx")
	if err := os.MkdirAll(mlxTower, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(q35, "config.json"))
	if err := os.WriteFile(filepath.Join(mlxTower, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := randmodel.AddQwenVision(mlxTower, randmodel.TinyQwenVision(), 7); err != nil {
		t.Fatal(err)
	}
	p := modeltest.Tokens(3, 15)
	for _, bits := range []int{0, 4} {
		var logits [2][]float32
		for i, src := range []string{next, q35} {
			out := filepath.Join(dir, fmt.Sprintf("mlx-%d-%d", i, bits))
			sum, err := create.Convert(context.Background(), src, out, create.Options{Bits: bits, GroupSize: 32})
			if err != nil {
				t.Fatal(err)
			}
			if i == 1 && len(sum.Dropped) != 1 {
				t.Errorf("dropped %v, want the mtp tensor", sum.Dropped)
			}
			m, err := model.Load(out, cpu.New(2))
			if err != nil {
				t.Fatal(err)
			}
			if i == 1 {
				sameTower(t, out, mlxTower)
				if m.Vision() == nil {
					t.Errorf("bits %d: the converted tower was not loaded", bits)
				}
			}
			caches, _ := m.NewCaches(true)
			logits[i] = modeltest.Forward(t, m, caches, p, 5)
			m.Close()
		}
		if r := modeltest.MaxRel(logits[1], logits[0]); r > 1e-5 {
			t.Errorf("bits %d: the converted Qwen3.5 checkpoint's logits differ from Qwen3-Next's by %.3g", bits, r)
		}
	}
}

// sameTower: the converted checkpoint's vision_tower.* tensors are mlx-vlm's layout of the
// same values, byte for byte and unquantized.
func sameTower(t *testing.T, got, want string) {
	t.Helper()
	a, err := safetensors.OpenDir(got)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := safetensors.OpenDir(want)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	n := 0
	for _, name := range b.Names() {
		wt, _ := b.Tensor(name)
		gt, ok := a.Tensor(name)
		if !ok || !slices.Equal(gt.Shape, wt.Shape) || gt.DType != wt.DType || !bytes.Equal(gt.Data, wt.Data) {
			t.Errorf("%s: converted %v, want %v %v", name, gt != nil, wt.Shape, wt.DType)
		}
		n++
	}
	if _, err := os.Stat(filepath.Join(got, "preprocessor_config.json")); err != nil || n == 0 {
		t.Errorf("%d tower tensors; preprocessor_config.json: %v", n, err)
	}
}
