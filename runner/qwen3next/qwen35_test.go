package qwen3next_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// qwen35Layout rewrites a float Qwen3-Next checkpoint in MLX layout (src) as the
// Qwen3.5/3.6 checkpoint mlx-lm writes for the same weights: config under text_config
// (model_type qwen3_5_moe), tensors under language_model., and the grouped
// in_proj_qkvz/in_proj_ba split into in_proj_qkv (all q, all k, all v), in_proj_z,
// in_proj_b and in_proj_a.
func qwen35Layout(t testing.TB, src, dst string, nk, nv, dk, dv int) {
	t.Helper()
	ck, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	r := nv / nk
	rowsOf := func(tt *safetensors.Tensor) [][]byte {
		n := tt.Shape[0]
		w := len(tt.Data) / n
		out := make([][]byte, n)
		for i := range out {
			out[i] = tt.Data[i*w : (i+1)*w]
		}
		return out
	}
	put := func(ts *[]safetensors.Tensor, name string, like *safetensors.Tensor, rows [][]byte) {
		var data []byte
		for _, row := range rows {
			data = append(data, row...)
		}
		*ts = append(*ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: like.DType,
			Shape: []int{len(rows), like.Shape[1]}}, Data: data})
	}
	var ts []safetensors.Tensor
	for _, name := range ck.Names() {
		tt, _ := ck.Tensor(name)
		out := "language_model." + name
		switch {
		case strings.HasSuffix(name, "in_proj_qkvz.weight"):
			rows := rowsOf(tt)
			var q, k, v, z [][]byte
			per := 2*dk + 2*r*dv
			for g := 0; g < nk; g++ {
				grp := rows[g*per : (g+1)*per]
				q, k = append(q, grp[:dk]...), append(k, grp[dk:2*dk]...)
				v, z = append(v, grp[2*dk:2*dk+r*dv]...), append(z, grp[2*dk+r*dv:]...)
			}
			base := strings.TrimSuffix(out, "in_proj_qkvz.weight")
			put(&ts, base+"in_proj_qkv.weight", tt, append(append(q, k...), v...))
			put(&ts, base+"in_proj_z.weight", tt, z)
		case strings.HasSuffix(name, "in_proj_ba.weight"):
			rows := rowsOf(tt)
			var b, a [][]byte
			for g := 0; g < nk; g++ {
				b, a = append(b, rows[g*2*r:g*2*r+r]...), append(a, rows[g*2*r+r:(g+1)*2*r]...)
			}
			base := strings.TrimSuffix(out, "in_proj_ba.weight")
			put(&ts, base+"in_proj_b.weight", tt, b)
			put(&ts, base+"in_proj_a.weight", tt, a)
		default:
			ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: out, DType: tt.DType, Shape: tt.Shape}, Data: tt.Data})
		}
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Write(filepath.Join(dst, "model.safetensors"), ts, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var text map[string]any
	if err := json.Unmarshal(raw, &text); err != nil {
		t.Fatal(err)
	}
	text["model_type"] = "qwen3_5_moe_text"
	cfg, _ := json.Marshal(map[string]any{"model_type": "qwen3_5_moe", "architectures": []string{"Qwen3_5MoeForConditionalGeneration"},
		"text_config": text, "tie_word_embeddings": text["tie_word_embeddings"]})
	if err := os.WriteFile(filepath.Join(dst, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestQwen35Layout: the same weights in Qwen3.5/3.6's layout (text_config,
// language_model.*, separate linear-attention projections) give Qwen3-Next's logits.
func TestQwen35Layout(t *testing.T) {
	next := load(t, 0)
	dst := filepath.Join(t.TempDir(), "qwen35")
	qwen35Layout(t, next.Dir, dst, 2, 4, 32, 32)
	m, err := model.Load(dst, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Config.ModelType != "qwen3_5_moe" || m.Config.NumLayers != 4 {
		t.Fatalf("config read as %s with %d layers", m.Config.ModelType, m.Config.NumLayers)
	}
	p := modeltest.Tokens(3, 17)
	a, _ := next.NewCaches(true)
	b, _ := m.NewCaches(true)
	want := modeltest.Forward(t, next, a, p, 6)
	if r := modeltest.MaxRel(modeltest.Forward(t, m, b, p, 6), want); r > 1e-5 {
		t.Errorf("the Qwen3.5 layout's logits differ from Qwen3-Next's by %.3g", r)
	}
	if !mlxtest.Enabled() {
		return
	}
	// The same on MLX (an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)), against the CPU backend.
	mm, err := model.Load(dst, mlxtest.Backend(t))
	if err != nil {
		t.Fatal(err)
	}
	defer mm.Close()
	c, _ := mm.NewCaches(true)
	if r := modeltest.MaxRel(modeltest.Forward(t, mm, c, p, 6), want); r > 1e-4 {
		t.Errorf("on MLX the Qwen3.5 layout's logits differ from the CPU backend's by %.3g", r)
	} else {
		t.Logf("qwen3_5_moe on MLX: relative logit difference from the CPU backend %.2g", r)
	}
}
