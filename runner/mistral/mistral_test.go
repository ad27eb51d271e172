package mistral_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"

	_ "github.com/mlxg/mlxg/runner/mistral"
)

// generate writes cfg (seed 7) and, with bits, its MLX conversion; it returns the
// directory to load.
func generate(t *testing.T, cfg randmodel.Config, bits int) string {
	t.Helper()
	dir := t.TempDir()
	hf, mlx := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 7}); err != nil {
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

func load(t *testing.T, dir string) *model.Model {
	t.Helper()
	m, err := model.Load(dir, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// rewrite copies the checkpoint in src to a new directory with each tensor renamed by
// name (dropped where it returns ""), and config.json edited by edit.
func rewrite(t *testing.T, src string, name func(string) string, edit func(map[string]any) map[string]any) string {
	t.Helper()
	dst := t.TempDir()
	ck, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var ts []safetensors.Tensor
	for _, n := range ck.Names() {
		if out := name(n); out != "" {
			st, _ := ck.Tensor(n)
			ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: out, DType: st.DType, Shape: st.Shape}, Data: st.Data})
		}
	}
	if err := safetensors.Write(filepath.Join(dst, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	raw, _ = json.Marshal(edit(cfg))
	if err := os.WriteFile(filepath.Join(dst, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

func same(name string) string { return name }

// TestSlidingWindow: Mistral's window (8 positions, every layer) keeps its caches to the
// window; a prompt of four windows gives the same logits in one pass, in chunks of 1
// and 5, and through the fp16 rotating caches; and the window is applied: the logits
// equal those of the same weights without a window up to the window's length, and
// differ after it.
func TestSlidingWindow(t *testing.T) {
	for _, bits := range []int{0, 4} {
		dir := generate(t, randmodel.TinyMistral(256), bits)
		m := load(t, dir)
		p := modeltest.Tokens(4, 32)
		caches, err := m.NewCaches(true)
		if err != nil {
			t.Fatal(err)
		}
		if w, ok := caches[1].(interface{ Window() int }); !ok || w.Window() != 8 {
			t.Fatalf("layer 1's cache is a %T, want one keeping a window of 8", caches[1])
		}
		want := modeltest.Forward(t, m, caches, p, len(p))
		for _, chunk := range []int{1, 5} {
			caches, _ := m.NewCaches(true)
			if r := modeltest.MaxRel(modeltest.Forward(t, m, caches, p, chunk), want); r > 1e-5 {
				t.Errorf("q%d: chunks of %d differ from one pass by %.3g", bits, chunk, r)
			}
		}
		fp16, _ := m.NewCaches(false)
		if _, ok := fp16[0].(*kvstore.Rotating); !ok {
			t.Fatalf("fp16 caches: layer 0 has a %T", fp16[0])
		}
		if r := modeltest.MaxRel(modeltest.Forward(t, m, fp16, p, 7), want); r > 2e-2 {
			t.Errorf("q%d: fp16 caches differ from float32 by %.3g", bits, r)
		}

		full := load(t, rewrite(t, dir, same, func(c map[string]any) map[string]any { c["sliding_window"] = nil; return c }))
		fc, _ := full.NewCaches(true)
		got := modeltest.Forward(t, full, fc, p, len(p))
		vocab := len(want) / len(p)
		for pos := range p {
			r := modeltest.MaxRel(got[pos*vocab:(pos+1)*vocab], want[pos*vocab:(pos+1)*vocab])
			if pos < 8 && r != 0 {
				t.Errorf("q%d: position %d (inside the window) differs without the window by %.3g", bits, pos, r)
			}
			if pos >= 9 && r < 1e-4 {
				t.Errorf("q%d: position %d (past the window) is the same without the window (%.3g)", bits, pos, r)
			}
		}
	}
}

// TestQueryScale: Ministral 3's query scale is 1 below original_max_position_embeddings
// (16 in the tiny model), so the logits there equal those of the same weights without
// llama_4_scaling_beta, bit for bit; past it they differ. Chunked passes cross the
// scale's steps exactly as one pass does.
func TestQueryScale(t *testing.T) {
	dir := generate(t, randmodel.TinyMinistral3(256), 0)
	m := load(t, dir)
	p := modeltest.Tokens(5, 40)
	caches, _ := m.NewCaches(true)
	want := modeltest.Forward(t, m, caches, p, len(p))
	for _, chunk := range []int{1, 7} {
		caches, _ := m.NewCaches(true)
		if r := modeltest.MaxRel(modeltest.Forward(t, m, caches, p, chunk), want); r > 1e-5 {
			t.Errorf("chunks of %d differ from one pass by %.3g", chunk, r)
		}
	}
	plain := load(t, rewrite(t, dir, same, func(c map[string]any) map[string]any {
		delete(c["rope_parameters"].(map[string]any), "llama_4_scaling_beta")
		return c
	}))
	pc, _ := plain.NewCaches(true)
	got := modeltest.Forward(t, plain, pc, p, len(p))
	vocab := len(want) / len(p)
	for pos := range p {
		r := modeltest.MaxRel(got[pos*vocab:(pos+1)*vocab], want[pos*vocab:(pos+1)*vocab])
		if pos < 16 && r != 0 {
			t.Errorf("position %d: the query scale is 1 there, yet the logits differ by %.3g", pos, r)
		}
		if pos >= 16 && r < 1e-5 {
			t.Errorf("position %d: the query scale is %v there, yet the logits are the same (%.3g)", pos, 1+0.1*math.Log(1+float64(pos/16)), r)
		}
	}
}

// TestMistral3Layouts: the multimodal wrapper's language model, read from mlx-lm's
// layout (language_model.model.*), from transformers 5's (model.language_model.*,
// lm_head) and converted by create from transformers 5's, gives the logits of the same
// weights saved as a plain ministral3 text model; the vision weights are left unbound.
func TestMistral3Layouts(t *testing.T) {
	cfg := randmodel.TinyMistral3(256)
	cfg.TieWordEmbeddings = false
	dir := generate(t, cfg, 0)
	p := modeltest.Tokens(6, 30)
	run := func(dir string) []float32 {
		m := load(t, dir)
		caches, _ := m.NewCaches(true)
		return modeltest.Forward(t, m, caches, p, len(p))
	}
	want := run(dir)
	text := rewrite(t, dir, func(n string) string {
		if rest, ok := strings.CutPrefix(n, "language_model."); ok {
			return rest
		}
		return ""
	}, func(c map[string]any) map[string]any { return c["text_config"].(map[string]any) })
	if got := run(text); modeltest.MaxRel(got, want) != 0 {
		t.Errorf("the plain ministral3 model differs from mistral3's language model by %.3g", modeltest.MaxRel(got, want))
	}
	hf5 := rewrite(t, dir, func(n string) string {
		switch {
		case strings.HasPrefix(n, "language_model.model."):
			return "model.language_model." + strings.TrimPrefix(n, "language_model.model.")
		case n == "language_model.lm_head.weight":
			return "lm_head.weight"
		}
		return "model." + n // the vision tower and projector
	}, func(c map[string]any) map[string]any { return c })
	if got := run(hf5); modeltest.MaxRel(got, want) != 0 {
		t.Errorf("transformers 5's layout differs by %.3g", modeltest.MaxRel(got, want))
	}
	mlx := filepath.Join(t.TempDir(), "mlx")
	sum, err := create.Convert(context.Background(), hf5, mlx, create.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Dropped) != 5 {
		t.Errorf("create dropped %v, want the 5 vision and projector tensors", sum.Dropped)
	}
	ck, err := safetensors.OpenDir(mlx)
	if err != nil {
		t.Fatal(err)
	}
	_, ok := ck.Tensor("language_model.model.embed_tokens.weight")
	_, head := ck.Tensor("language_model.lm_head.weight")
	ck.Close()
	if !ok || !head {
		t.Errorf("create did not move the language model to language_model.*")
	}
	if got := run(mlx); modeltest.MaxRel(got, want) > 1e-6 {
		t.Errorf("create's conversion differs by %.3g", modeltest.MaxRel(got, want))
	}
}

// TestLayerTypes: layer_types picks the sliding layers; a sliding layer without a
// window is refused.
func TestLayerTypes(t *testing.T) {
	dir := generate(t, randmodel.TinyMistral(256), 0)
	mixed := load(t, rewrite(t, dir, same, func(c map[string]any) map[string]any {
		c["layer_types"] = []string{"full_attention", "sliding_attention"}
		return c
	}))
	caches, _ := mixed.NewCaches(false)
	if _, ok := caches[0].(*kvstore.Rotating); ok {
		t.Error("layer 0 (full_attention) got a rotating cache")
	}
	if _, ok := caches[1].(*kvstore.Rotating); !ok {
		t.Errorf("layer 1 (sliding_attention) got a %T", caches[1])
	}
	bad := rewrite(t, dir, same, func(c map[string]any) map[string]any {
		c["layer_types"] = []string{"full_attention", "sliding_attention"}
		c["sliding_window"] = nil
		return c
	})
	if _, err := model.Load(bad, cpu.New(1)); err == nil || !strings.Contains(err.Error(), "sliding_window is not set") {
		t.Errorf("a sliding layer without a window: %v", err)
	}
	moe := rewrite(t, dir, same, func(c map[string]any) map[string]any { c["num_local_experts"] = 8; return c })
	if _, err := model.Load(moe, cpu.New(1)); err == nil || !strings.Contains(err.Error(), "mixture of experts") {
		t.Errorf("a Mixtral config: %v", err)
	}
}

// TestMaxKVSize: the KV policy's caches give every sliding layer a ring of its window, or of
// --max-kv-size where that is shorter (the user's choice to keep less), and both run past
// the window; a ring longer than the window is refused.
func TestMaxKVSize(t *testing.T) {
	dir := generate(t, randmodel.TinyMistral(256), 0)
	m := load(t, dir)
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	shape, err := kvstore.ShapeFromConfig(cfg, m.WeightBytes())
	if err != nil {
		t.Fatal(err)
	}
	p := modeltest.Tokens(8, 20)
	for _, max := range []int{0, 4} {
		layout, err := kvstore.NewLayout(shape, kvstore.SpecF16, 0, kvstore.SpecF16)
		if err != nil {
			t.Fatal(err)
		}
		layout.MaxKVSize = max
		caches, err := kvstore.NewCaches(shape, layout)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Forward(context.Background(), p, caches, false); err != nil {
			t.Errorf("--max-kv-size %d: %v", max, err)
		}
	}
	long := make([]kvstore.Layer, 2)
	for i := range long {
		long[i], _ = kvstore.NewRotating(2, 32, 32, 16, kvstore.SpecF16, 0)
	}
	if _, err := m.Forward(context.Background(), p, long, false); err == nil || !strings.Contains(err.Error(), "sliding-window layer of 8") {
		t.Errorf("rings of 16 on layers of a window of 8: %v", err)
	}
}
