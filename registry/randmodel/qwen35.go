package randmodel

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mlxg/mlxg/internal/files"
	"github.com/mlxg/mlxg/registry/safetensors"
)

// GenerateQwen35 writes a Qwen3.5/3.6 checkpoint in Hugging Face's layout (model_type
// qwen3_5_moe, Qwen3_5MoeForConditionalGeneration; qwen3_5,
// Qwen3_5ForConditionalGeneration, when c has no experts): the qwen3_next model of c
// (float32) with its language model under model.language_model.*, config.json's text
// fields in text_config, fused experts (experts.gate_up_proj [experts, 2·inter, hidden],
// the gate first, and experts.down_proj), and the linear layers' in_proj_qkv (all q, all
// k, all v), in_proj_z, in_proj_b and in_proj_a; with v set, a vision tower of that shape
// (AddQwenVisionHF) and an mrope_section over the rotary frequencies.
func GenerateQwen35(dir string, c Config, v *QwenVision, opts Options) error {
	if c.Arch != "qwen3_next" || c.DType != "float32" {
		return fmt.Errorf("randmodel: GenerateQwen35 takes a float32 qwen3_next config")
	}
	tmp, err := os.MkdirTemp("", "randmodel-qwen35-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := Generate(tmp, c, opts); err != nil {
		return err
	}
	ck, err := safetensors.OpenDir(tmp)
	if err != nil {
		return err
	}
	defer ck.Close()
	nk, nv, dk, dv, E, h := c.LinearKHeads, c.LinearVHeads, c.LinearKHeadDim, c.LinearVHeadDim, c.NumExperts, c.HiddenSize
	r := nv / nk
	rows := func(name string) [][]byte {
		t, _ := ck.Tensor(name)
		w := len(t.Data) / t.Shape[0]
		out := make([][]byte, t.Shape[0])
		for i := range out {
			out[i] = t.Data[i*w : (i+1)*w]
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
	for _, name := range ck.Names() {
		t, _ := ck.Tensor(name)
		out := name
		if rest, ok := strings.CutPrefix(name, "model."); ok {
			out = "model.language_model." + rest
		}
		switch {
		case strings.Contains(name, ".mlp.experts."):
			if !strings.HasSuffix(name, ".mlp.experts.0.gate_proj.weight") {
				continue
			}
			base, src := strings.TrimSuffix(out, ".0.gate_proj.weight"), strings.TrimSuffix(name, "0.gate_proj.weight")
			var gu, down [][][]byte
			for e := range E {
				gu = append(gu, rows(fmt.Sprintf("%s%d.gate_proj.weight", src, e)), rows(fmt.Sprintf("%s%d.up_proj.weight", src, e)))
				down = append(down, rows(fmt.Sprintf("%s%d.down_proj.weight", src, e)))
			}
			put(base+".gate_up_proj", []int{E, 2 * c.MoEIntermediate, h}, gu...)
			put(base+".down_proj", []int{E, h, c.MoEIntermediate}, down...)
		case strings.HasSuffix(name, "in_proj_qkvz.weight"):
			all := rows(name)
			var q, k, vv, z [][]byte
			per := 2*dk + 2*r*dv
			for g := range nk {
				grp := all[g*per : (g+1)*per]
				q, k = append(q, grp[:dk]...), append(k, grp[dk:2*dk]...)
				vv, z = append(vv, grp[2*dk:2*dk+r*dv]...), append(z, grp[2*dk+r*dv:]...)
			}
			base := strings.TrimSuffix(out, "in_proj_qkvz.weight")
			put(base+"in_proj_qkv.weight", []int{2*nk*dk + nv*dv, h}, q, k, vv)
			put(base+"in_proj_z.weight", []int{nv * dv, h}, z)
		case strings.HasSuffix(name, "in_proj_ba.weight"):
			all := rows(name)
			var b, a [][]byte
			for g := range nk {
				b, a = append(b, all[g*2*r:g*2*r+r]...), append(a, all[g*2*r+r:(g+1)*2*r]...)
			}
			base := strings.TrimSuffix(out, "in_proj_ba.weight")
			put(base+"in_proj_b.weight", []int{nv, h}, b)
			put(base+"in_proj_a.weight", []int{nv, h}, a)
		default:
			ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: out, DType: t.DType, Shape: t.Shape}, Data: t.Data})
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	mt := "qwen3_5_moe"
	if E == 0 {
		mt = "qwen3_5"
	}
	text := c.HFConfig()
	text["model_type"] = mt + "_text"
	cfg := map[string]any{"model_type": mt, "architectures": []string{archNames[mt]},
		"text_config": text, "torch_dtype": "float32", "tie_word_embeddings": c.TieWordEmbeddings}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		return err
	}
	entries, _ := os.ReadDir(tmp)
	for _, e := range entries {
		n := e.Name()
		if n == "config.json" || strings.HasSuffix(n, ".safetensors") || n == safetensors.IndexFile || e.IsDir() {
			continue
		}
		if err := files.Copy(filepath.Join(tmp, n), filepath.Join(dir, n)); err != nil {
			return err
		}
	}
	if v != nil {
		return AddQwenVisionHF(dir, *v, opts.Seed)
	}
	return nil
}
