package phi3_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"

	_ "github.com/mlxg/mlxg/runner/llama"
	_ "github.com/mlxg/mlxg/runner/phi3"
)

func generate(t *testing.T, cfg randmodel.Config, bits int) string {
	t.Helper()
	dir := t.TempDir()
	hf, mlx := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 8}); err != nil {
		t.Fatal(err)
	}
	if bits == 0 {
		return hf
	}
	if _, err := create.Convert(context.Background(), hf, mlx, create.Options{Bits: bits, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	return mlx
}

func run(t *testing.T, dir string, p []int32, chunk int) []float32 {
	t.Helper()
	m, err := model.Load(dir, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	caches, err := m.NewCaches(true)
	if err != nil {
		t.Fatal(err)
	}
	return modeltest.Forward(t, m, caches, p, chunk)
}

// unfuse writes src as a llama checkpoint: qkv_proj split into q_proj, k_proj and v_proj
// and gate_up_proj into gate_proj and up_proj, each part of the weight, scales and
// biases its own rows; the config keeps Phi-3's RoPE (partial, longrope), which the
// llama architecture reads the same way.
func unfuse(t *testing.T, src string, q, kv, inter int) string {
	t.Helper()
	dst := t.TempDir()
	ck, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var ts []safetensors.Tensor
	part := func(st *safetensors.Tensor, name string, start, n int) safetensors.Tensor {
		row := len(st.Data) / st.Shape[0]
		shape := append([]int{n}, st.Shape[1:]...)
		return safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: st.DType, Shape: shape}, Data: st.Data[start*row : (start+n)*row]}
	}
	for _, n := range ck.Names() {
		st, _ := ck.Tensor(n)
		if base, sfx, ok := strings.Cut(n, "self_attn.qkv_proj"); ok {
			ts = append(ts, part(st, base+"self_attn.q_proj"+sfx, 0, q), part(st, base+"self_attn.k_proj"+sfx, q, kv), part(st, base+"self_attn.v_proj"+sfx, q+kv, kv))
			continue
		}
		if base, sfx, ok := strings.Cut(n, "mlp.gate_up_proj"); ok {
			ts = append(ts, part(st, base+"mlp.gate_proj"+sfx, 0, inter), part(st, base+"mlp.up_proj"+sfx, inter, inter))
			continue
		}
		ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: n, DType: st.DType, Shape: st.Shape}, Data: st.Data})
	}
	if err := safetensors.Write(filepath.Join(dst, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	edit(t, src, dst, func(c map[string]any) { c["model_type"] = "llama" })
	return dst
}

// edit writes src's config.json, changed by fn, into dst.
func edit(t *testing.T, src, dst string, fn func(map[string]any)) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	fn(c)
	raw, _ = json.Marshal(c)
	if err := os.WriteFile(filepath.Join(dst, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFusedMatchesSplit: Phi-3's fused projections, bound by rows, compute exactly what
// the same rows stored as separate projections compute (float32 and 4-bit), over a
// prompt that crosses longrope's switch.
func TestFusedMatchesSplit(t *testing.T) {
	cfg := randmodel.TinyPhi3(256)
	hd := cfg.HeadDim
	for _, bits := range []int{0, 4} {
		dir := generate(t, cfg, bits)
		p := modeltest.Tokens(3, 48)
		want := run(t, dir, p, len(p))
		got := run(t, unfuse(t, dir, cfg.NumHeads*hd, cfg.NumKVHeads*hd, cfg.IntermediateSize), p, len(p))
		if r := modeltest.MaxRel(got, want); r != 0 {
			t.Errorf("q%d: fused and split projections differ by %.3g", bits, r)
		}
	}
}

// TestLongrope: the long factors take over at original_max_position_embeddings (32 in
// the tiny model): the logits before it equal those of a model whose long factors are
// its short ones, bit for bit, and differ from it; a prompt across the switch gives the
// same logits in one pass and in chunks.
func TestLongrope(t *testing.T) {
	dir := generate(t, randmodel.TinyPhi3(256), 0)
	p := modeltest.Tokens(4, 48)
	want := run(t, dir, p, len(p))
	for _, chunk := range []int{1, 5, 31} {
		if r := modeltest.MaxRel(run(t, dir, p, chunk), want); r > 1e-5 {
			t.Errorf("chunks of %d differ from one pass by %.3g", chunk, r)
		}
	}
	short := t.TempDir()
	for _, f := range []string{"model.safetensors"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(short, f), data, 0o644)
	}
	edit(t, dir, short, func(c map[string]any) {
		rs := c["rope_scaling"].(map[string]any)
		rs["long_factor"] = rs["short_factor"]
		delete(c, "rope_parameters")
	})
	got := run(t, short, p, len(p))
	vocab := len(want) / len(p)
	for pos := range p {
		r := modeltest.MaxRel(got[pos*vocab:(pos+1)*vocab], want[pos*vocab:(pos+1)*vocab])
		if pos < 32 && r != 0 {
			t.Errorf("position %d (short factors) differs by %.3g", pos, r)
		}
		if pos >= 32 && r < 1e-5 {
			t.Errorf("position %d (long factors) is the same with the short ones (%.3g)", pos, r)
		}
	}
}
