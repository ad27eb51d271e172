package gemma4_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/gemma4"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// tinies are the random Gemma 4 checkpoints the tests run: the E2B kind (per-layer
// embeddings, KV-shared layers, double-wide MLPs) and the 26B-A4B kind in the
// multimodal layout (text_config nested; attention_k_eq_v; experts beside the MLP).
var tinies = []struct {
	name string
	cfg  randmodel.Config
}{
	{"e2b", randmodel.TinyGemma4(256)},
	{"moe", randmodel.TinyGemma4MoE(256)},
}

// convert writes cfg's random checkpoint and converts it with `mlxg create` opts.
func convert(t *testing.T, cfg randmodel.Config, opts create.Options) string {
	t.Helper()
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, opts); err != nil {
		t.Fatal(err)
	}
	return out
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

// TestChunksAndCaches: a prompt longer than the sliding window in one pass and in chunks
// of 1 and 5 gives the same logits (within 1e-4: a chunk of one takes the decode
// kernels), float32 and 4-bit; the fp16 sliding-window caches attend as caches that keep
// every position; the KV-shared layers' caches store nothing.
func TestChunksAndCaches(t *testing.T) {
	for _, tc := range tinies {
		for _, q := range []struct {
			name string
			opts create.Options
		}{{"f32", create.Options{}}, {"q4", create.Options{Bits: 4, GroupSize: 32}}} {
			t.Run(tc.name+"/"+q.name, func(t *testing.T) {
				m := load(t, convert(t, tc.cfg, q.opts))
				p := modeltest.Tokens(3, 40)
				caches, err := m.NewCaches(true)
				if err != nil {
					t.Fatal(err)
				}
				want := modeltest.Forward(t, m, caches, p, len(p))
				for _, chunk := range []int{1, 5} {
					caches, _ := m.NewCaches(true)
					if r := modeltest.MaxRel(modeltest.Forward(t, m, caches, p, chunk), want); r > 1e-4 {
						t.Errorf("chunks of %d differ from one pass by %.3g", chunk, r)
					}
				}
				// The fp16 caches (Rotating on the sliding layers, which drops what the window
				// no longer sees) against fp16 caches that keep every position: the random
				// models' attention (scale 1 over normed q and k) is too sharp, and their
				// routing too close, to compare fp16 with float32 caches.
				fp16, _ := m.NewCaches(false)
				kept, _ := m.NewCaches(false)
				for i, c := range kept {
					if r, ok := c.(*kvstore.Rotating); ok {
						h, kd, vd := r.Dims()
						if kept[i], err = kvstore.NewFullWindow(h, kd, vd, false, r.Window()); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := m.FillCaches(kept); err != nil {
					t.Fatal(err)
				}
				if r := modeltest.MaxRel(modeltest.Forward(t, m, fp16, p, 7), modeltest.Forward(t, m, kept, p, 7)); r > 1e-5 {
					t.Errorf("sliding-window caches differ from caches that keep every position by %.3g", r)
				}
				shared := 0
				for i, c := range fp16 {
					if s, ok := c.(*kvstore.Shared); ok {
						shared++
						if s.Bytes() != 0 || s.Len() != len(p) {
							t.Errorf("layer %d: a shared cache of %d bytes, %d positions", i, s.Bytes(), s.Len())
						}
					}
				}
				if shared != tc.cfg.KVSharedLayers {
					t.Errorf("%d shared caches, want %d", shared, tc.cfg.KVSharedLayers)
				}
			})
		}
	}
}

// TestPolicyCaches: the KV policy's caches (kvstore.NewCaches from config.json's shape:
// full layers of their own head size, nothing for the KV-shared layers) run the model as
// its own caches do.
func TestPolicyCaches(t *testing.T) {
	for _, tc := range tinies {
		t.Run(tc.name, func(t *testing.T) {
			dir := convert(t, tc.cfg, create.Options{})
			m := load(t, dir)
			data, err := os.ReadFile(filepath.Join(dir, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			shape, err := kvstore.ShapeFromConfig(data, m.WeightBytes())
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range shape.Layers {
				if shared := i >= len(shape.Layers)-tc.cfg.KVSharedLayers; shared != (l.Kind == kvstore.LayerNone) {
					t.Errorf("layer %d: kind %v", i, l.Kind)
				}
			}
			layout, err := kvstore.NewLayout(shape, kvstore.SpecF16, 0, kvstore.SpecF16)
			if err != nil {
				t.Fatal(err)
			}
			policy, err := kvstore.NewCaches(shape, layout)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.FillCaches(policy); err != nil {
				t.Fatal(err)
			}
			own, _ := m.NewCaches(false)
			p := modeltest.Tokens(4, 30)
			got, want := modeltest.Forward(t, m, policy, p, 6), modeltest.Forward(t, m, own, p, 6)
			if !slices.Equal(got, want) {
				t.Errorf("the policy's caches give other logits than the model's (%.3g relative)", modeltest.MaxRel(got, want))
			}
			var bytes int64
			for _, c := range policy {
				bytes += c.Bytes()
			}
			seq := model.Seq(policy)
			for i, l := range seq.Layers {
				if (l == nil) != (shape.Layers[i].Kind == kvstore.LayerNone) {
					t.Errorf("the prefix cache sees layer %d as %T", i, l)
				}
			}
			if bytes == 0 {
				t.Error("the caches hold no bytes")
			}
		})
	}
}

// TestSources: the KV-shared layers read the last earlier layer of their kind.
func TestSources(t *testing.T) {
	g := gemma4.Config{NumKVSharedLayers: 3}
	sliding := []bool{true, true, false, true, false, true, true, false}
	src, err := g.Sources(sliding)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 1, 2, 3, 4, 3, 3, 4}; !slices.Equal(src, want) {
		t.Fatalf("sources %v, want %v", src, want)
	}
	if _, err := (gemma4.Config{NumKVSharedLayers: 2}).Sources([]bool{true, true, false}); err == nil {
		t.Error("a shared full layer with no full layer before it")
	}
	types, err := (gemma4.Config{SlidingWindow: 4}).Sliding(13)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, true, true, true, true, false, true, true, true, true, true, false, false}; !slices.Equal(types, want) {
		t.Fatalf("default layer types %v", types)
	}
}

// TestOlderMLXLayout: a checkpoint in mlx-lm's older layout (the language model under
// language_model. without the inner model., the per-layer table cut into one table per
// layer) gives the same logits as the current one.
func TestOlderMLXLayout(t *testing.T) {
	cfg := randmodel.TinyGemma4(256)
	dir := convert(t, cfg, create.Options{})
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var ts []safetensors.Tensor
	for _, n := range ck.Names() {
		src, _ := ck.Tensor(n)
		name := "language_model." + strings.TrimPrefix(n, "model.")
		if n != "model.embed_tokens_per_layer.weight" {
			ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: src.DType, Shape: src.Shape}, Data: src.Data})
			continue
		}
		V, cols, p := src.Shape[0], src.Shape[1], cfg.PerLayerInput
		size := src.DType.Size()
		for i := 0; i < cols/p; i++ {
			data := make([]byte, 0, V*p*size)
			for r := 0; r < V; r++ {
				data = append(data, src.Data[(r*cols+i*p)*size:(r*cols+(i+1)*p)*size]...)
			}
			ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: fmt.Sprintf("language_model.embed_tokens_per_layer.%d.weight", i),
				DType: src.DType, Shape: []int{V, p}}, Data: data})
		}
	}
	old := t.TempDir()
	if err := safetensors.Write(filepath.Join(old, "model.safetensors"), ts, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "generation_config.json"} {
		if data, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
			if err := os.WriteFile(filepath.Join(old, f), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	p := modeltest.Tokens(5, 20)
	a, b := load(t, dir), load(t, old)
	ca, _ := a.NewCaches(true)
	cb, _ := b.NewCaches(true)
	if got, want := modeltest.Forward(t, b, cb, p, 7), modeltest.Forward(t, a, ca, p, 7); !slices.Equal(got, want) {
		t.Errorf("the older layout's logits differ by %.3g relative", modeltest.MaxRel(got, want))
	}
}

// TestHuggingFaceLayout: a dense checkpoint in Hugging Face's layout loads as it is, with
// the logits of its conversion; one with experts (fused gate_up_proj) is refused with a
// pointer to `mlxg create`.
func TestHuggingFaceLayout(t *testing.T) {
	cfg := randmodel.TinyGemma4(256)
	hf := t.TempDir()
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 7}); err != nil {
		t.Fatal(err)
	}
	p := modeltest.Tokens(6, 20)
	a, b := load(t, hf), load(t, convert(t, cfg, create.Options{}))
	ca, _ := a.NewCaches(true)
	cb, _ := b.NewCaches(true)
	if got, want := modeltest.Forward(t, a, ca, p, 20), modeltest.Forward(t, b, cb, p, 20); !slices.Equal(got, want) {
		t.Errorf("Hugging Face's layout gives other logits than its conversion (%.3g relative)", modeltest.MaxRel(got, want))
	}
	moe := t.TempDir()
	if err := randmodel.Generate(moe, randmodel.TinyGemma4MoE(256), randmodel.Options{Seed: 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := model.Load(moe, cpu.New(1)); err == nil || !strings.Contains(err.Error(), "mlxg create") {
		t.Errorf("loading fused experts: %v, want an error pointing to mlxg create", err)
	}
}

// TestWeightsInPlace: `mlxg create` writes Gemma 4's tensors so that the CPU backend reads
// every quantized weight in place from the mapping. The two-byte bfloat16 layer_scalar of
// each layer would otherwise misalign the tensors after it, and the backend would hold a
// copy of each of them besides the mapped pages (CopiedWeightBytes): 456 MiB of a 4-layer
// Gemma 4 31B, 793 MiB of a 4-layer 26B-A4B.
func TestWeightsInPlace(t *testing.T) {
	for _, tc := range tinies {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.DType = "bfloat16" // as Gemma 4 ships: its layer_scalar is then two bytes
			dir := convert(t, cfg, create.Options{Bits: 4, GroupSize: 32})
			ck, err := safetensors.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			scalars := 0
			for _, n := range ck.Names() {
				if strings.HasSuffix(n, ".layer_scalar") {
					scalars++
				}
			}
			ck.Close()
			if scalars == 0 {
				t.Fatal("the checkpoint has no layer_scalar: the test no longer covers odd-sized tensors")
			}
			be := cpu.New(1)
			m, err := model.Load(dir, be)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if n := be.CopiedWeightBytes(); n != 0 {
				t.Errorf("the CPU backend copied %d bytes of quantized weights out of the mapping (misaligned tensors)", n)
			}
		})
	}
}

// TestMisalignedInPlace: the same 4-bit checkpoint rewritten in name order without padding,
// as MLX's save_safetensors leaves Gemma 4 (every tensor after a two-byte layer_scalar
// misaligned), gives the created checkpoint's logits bit for bit, in prefill chunks and
// in one-token decode steps, and on amd64 and arm64 (cpu.ReadsMisaligned) the CPU backend
// copies none of its weights to get them; for the dense model and the mixture of experts.
func TestMisalignedInPlace(t *testing.T) {
	for _, tc := range tinies {
		t.Run(tc.name, func(t *testing.T) { misalignedInPlace(t, tc.cfg) })
	}
}

func misalignedInPlace(t *testing.T, cfg randmodel.Config) {
	cfg.DType = "bfloat16"
	dir := convert(t, cfg, create.Options{Bits: 4, GroupSize: 32})
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var ts []safetensors.Tensor
	for _, n := range slices.Sorted(slices.Values(ck.Names())) {
		tt, _ := ck.Tensor(n)
		ts = append(ts, *tt)
	}
	packed := t.TempDir()
	if err := safetensors.Write(filepath.Join(packed, "model.safetensors"), ts, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "generation_config.json"} {
		if data, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
			if err := os.WriteFile(filepath.Join(packed, f), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	pk, err := safetensors.OpenDir(packed)
	if err != nil {
		t.Fatal(err)
	}
	misaligned := 0
	for _, n := range pk.Names() {
		if tt, _ := pk.Tensor(n); tt.DType == safetensors.U32 && uintptr(unsafe.Pointer(&tt.Data[0]))%4 != 0 {
			misaligned++
		}
	}
	pk.Close()
	if misaligned == 0 {
		t.Fatal("the rewritten checkpoint has no misaligned packed codes: the test covers nothing")
	}
	be := cpu.New(2)
	b, err := model.Load(packed, be)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if n := be.CopiedWeightBytes(); cpu.ReadsMisaligned && n != 0 {
		t.Errorf("the CPU backend copied %d bytes of misaligned weights", n)
	}
	a := load(t, dir)
	p := modeltest.Tokens(6, 12)
	for _, chunk := range []int{5, 1} {
		ca, _ := a.NewCaches(true)
		cb, _ := b.NewCaches(true)
		if got, want := modeltest.Forward(t, b, cb, p, chunk), modeltest.Forward(t, a, ca, p, chunk); !slices.Equal(got, want) {
			t.Errorf("chunks of %d: the misaligned checkpoint's logits differ by %.3g relative", chunk, modeltest.MaxRel(got, want))
		}
	}
}
