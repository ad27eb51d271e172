package create

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
)

// Gemma 4 in the multimodal layout converts as mlx-lm converts it: the language model
// under language_model.model., the fused experts split into switch_glu's stacked gate and
// up (the gate first) and down, the router and the dense MLP beside the experts at 8 bits.
func TestGemma4Layout(t *testing.T) {
	cfg := randmodel.TinyGemma4MoE(256)
	src := t.TempDir()
	if err := randmodel.Generate(src, cfg, randmodel.Options{Seed: 3}); err != nil {
		t.Fatal(err)
	}
	in, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := Convert(context.Background(), src, dst, Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	out, err := safetensors.OpenDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	for _, n := range out.Names() {
		if strings.HasPrefix(n, "model.") || strings.Contains(n, "gate_up_proj") {
			t.Errorf("tensor %s left in Hugging Face's layout", n)
		}
	}
	E, I, h := cfg.NumExperts, cfg.MoEIntermediate, cfg.HiddenSize
	p := "language_model.model.layers.1."
	for name, shape := range map[string][]int{
		p + "experts.switch_glu.gate_proj.weight":  {E, I, h * 4 / 32},
		p + "experts.switch_glu.up_proj.weight":    {E, I, h * 4 / 32},
		p + "experts.switch_glu.down_proj.weight":  {E, h, I * 4 / 32},
		p + "router.proj.weight":                   {E, h * 8 / 32},
		p + "mlp.gate_proj.weight":                 {cfg.IntermediateSize, h * 8 / 32},
		p + "layer_scalar":                         {1},
		"language_model.model.embed_tokens.weight": {cfg.VocabSize, h * 4 / 32},
	} {
		tt, ok := out.Tensor(name)
		if !ok || !slices.Equal(tt.Shape, shape) {
			t.Errorf("%s: %v, want %v (present %v)", name, tt, shape, ok)
		}
	}
	// The up half of expert 3 is rows I..2I-1 of its fused matrix: compare its float
	// values through a float conversion.
	fdst := filepath.Join(t.TempDir(), "float")
	if _, err := Convert(context.Background(), src, fdst, Options{}); err != nil {
		t.Fatal(err)
	}
	fl, err := safetensors.OpenDir(fdst)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	fused, _ := in.Tensor("model.language_model.layers.1.experts.gate_up_proj")
	up, _ := fl.Tensor(p + "experts.switch_glu.up_proj.weight")
	fv, _ := fused.Float32s()
	uv, _ := up.Float32s()
	e := 3
	if !slices.Equal(uv[e*I*h:(e+1)*I*h], fv[(e*2*I+I)*h:(e*2*I+2*I)*h]) {
		t.Error("switch_glu.up_proj is not the second half of the fused experts.gate_up_proj")
	}
	q := readConfig(t, dst)["quantization"].(map[string]any)
	for _, m := range []string{p + "router.proj", p + "mlp.down_proj"} {
		if o, ok := q[m].(map[string]any); !ok || o["bits"] != 8.0 || o["group_size"] != 64.0 {
			t.Errorf("quantization[%s] = %v, want 8 bits in groups of 64", m, q[m])
		}
	}
}
