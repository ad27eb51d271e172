package glm4moe_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"

	_ "github.com/mlxg/mlxg/runner/glm4moe"
)

// tiny writes the tiny preset of arch in Hugging Face's layout and converts it with
// `mlxg create` (bits 0: float32).
func tiny(t *testing.T, arch string, bits int) (hf, mlx string) {
	t.Helper()
	hf, mlx = filepath.Join(t.TempDir(), "hf"), filepath.Join(t.TempDir(), "mlx")
	cfg, err := randmodel.TinyOf(arch, 256)
	if err != nil {
		t.Fatal(err)
	}
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 11}); err != nil {
		t.Fatal(err)
	}
	convertTo(t, hf, mlx, bits)
	return hf, mlx
}

// convertTo converts the Hugging Face checkpoint hf into out with `mlxg create` (bits 0:
// float32, else affine in groups of 32).
func convertTo(t *testing.T, hf, out string, bits int) {
	t.Helper()
	if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: bits, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
}

// TestChunksAndCaches: for both architectures, float and 4-bit, the prompt in one pass,
// in chunks of 1 and 5, and (float weights) through fp16 caches give the same logits.
func TestChunksAndCaches(t *testing.T) {
	for _, arch := range []string{"glm4_moe", "glm4_moe_lite"} {
		for _, bits := range []int{0, 4} {
			_, dir := tiny(t, arch, bits)
			m, err := model.Load(dir, cpu.New(2))
			if err != nil {
				t.Fatal(err)
			}
			p := modeltest.Tokens(3, 40)
			caches, _ := m.NewCaches(true)
			want := modeltest.Forward(t, m, caches, p, len(p))
			for _, chunk := range []int{1, 5} {
				caches, _ := m.NewCaches(true)
				if r := modeltest.MaxRel(modeltest.Forward(t, m, caches, p, chunk), want); r > 1e-5 {
					t.Errorf("%s q%d: chunks of %d differ from one pass by %.3g", arch, bits, chunk, r)
				}
			}
			// fp16 caches round the keys and values; on 4-bit weights that rounding can
			// tip a near tie of the grouped router (2 groups, 1 kept) to another group, after
			// which the two runs are different models: compared on float weights only.
			fp16, _ := m.NewCaches(false)
			if r := modeltest.MaxRel(modeltest.Forward(t, m, fp16, p, 7), want); bits == 0 && r > 2e-2 {
				t.Errorf("%s q%d: fp16 caches differ from float32 by %.3g", arch, bits, r)
			}
			m.Close()
		}
	}
}

// TestLayoutRefused: the Hugging Face layout (one tensor per expert; kv_b_proj whole) is
// not read as it is; the error says to convert.
func TestLayoutRefused(t *testing.T) {
	for _, arch := range []string{"glm4_moe", "glm4_moe_lite"} {
		hf, _ := tiny(t, arch, 0)
		if _, err := model.Load(hf, cpu.New(1)); err == nil || !strings.Contains(err.Error(), "mlxg create") {
			t.Errorf("%s: loading the Hugging Face layout: %v, want an error pointing to mlxg create", arch, err)
		}
	}
}

// TestCancelledPass: a GLM-4.7-Flash pass whose context is done stops at its first latent
// attention and leaves the latent caches as they were.
func TestCancelledPass(t *testing.T) {
	_, dir := tiny(t, "glm4_moe_lite", 4)
	m, err := model.Load(dir, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	caches, _ := m.NewCaches(false)
	if _, err := m.Forward(context.Background(), modeltest.Tokens(1, 3), caches, false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Forward(ctx, modeltest.Tokens(2, 4), caches, false); err != context.Canceled {
		t.Fatalf("cancelled Forward: %v", err)
	}
	for i, c := range caches {
		if c.Len() != 3 {
			t.Fatalf("layer %d cache holds %d positions after a cancelled pass, want 3", i, c.Len())
		}
	}
}

// TestCreateLayout: `mlxg create` leaves out the multi-token prediction layer after the
// last, keeps the router in float and its correction bias in float32, and for
// glm4_moe_lite replaces kv_b_proj by the per-head embed_q and unembed_out, quantized.
func TestCreateLayout(t *testing.T) {
	for _, arch := range []string{"glm4_moe", "glm4_moe_lite"} {
		hf, dir := tiny(t, arch, 4)
		src, err := safetensors.OpenDir(hf)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := src.Tensor("model.layers.3.eh_proj.weight"); !ok {
			t.Fatalf("%s: the Hugging Face checkpoint has no multi-token prediction layer to drop", arch)
		}
		src.Close()
		ck, err := safetensors.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ck.Names() {
			if strings.HasPrefix(n, "model.layers.3.") || strings.Contains(n, "kv_b_proj") {
				t.Errorf("%s: %s kept", arch, n)
			}
		}
		want := map[string]safetensors.DType{
			"model.layers.1.mlp.gate.weight":                   safetensors.F32,
			"model.layers.1.mlp.gate.e_score_correction_bias":  safetensors.F32,
			"model.layers.1.mlp.switch_mlp.gate_proj.weight":   safetensors.U32,
			"model.layers.1.mlp.shared_experts.up_proj.scales": safetensors.F32,
		}
		if arch == "glm4_moe_lite" {
			want["model.layers.0.self_attn.embed_q.weight"] = safetensors.U32
			want["model.layers.0.self_attn.unembed_out.scales"] = safetensors.F32
		}
		for n, dt := range want {
			if tn, ok := ck.Tensor(n); !ok || tn.DType != dt {
				t.Errorf("%s: %s: %v, want %s", arch, n, tn, dt)
			}
		}
		if _, ok := ck.Tensor("model.layers.1.mlp.gate.scales"); ok {
			t.Errorf("%s: the router is quantized", arch)
		}
		ck.Close()
	}
}
