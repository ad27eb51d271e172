package create

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/half"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
)

func genTiny(t *testing.T, arch string, mutate func(*randmodel.Config)) string {
	t.Helper()
	cfg := randmodel.Tiny(arch, 256)
	if mutate != nil {
		mutate(&cfg)
	}
	dir := t.TempDir()
	if err := randmodel.Generate(dir, cfg, randmodel.Options{Seed: 5}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readConfig(t *testing.T, dir string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// code reads code i of a packed row as a little-endian bit stream, the layout of
// MLX's extract_bits (mlx/backend/cpu/quantized.cpp), written here independently of
// internal/quant.
func code(row []byte, i, bits int) int {
	v := 0
	for b := range bits {
		bit := i*bits + b
		v |= int(row[bit/8]>>(bit%8)&1) << b
	}
	return v
}

func TestQuantizedLayout(t *testing.T) {
	for _, tc := range []struct {
		arch        string
		bits, group int
	}{{"llama", 4, 32}, {"qwen2", 3, 64}, {"qwen3", 6, 128}, {"llama", 5, 32}, {"qwen3", 2, 64}, {"qwen2", 8, 128}} {
		t.Run(tc.arch+"-q"+string(rune('0'+tc.bits)), func(t *testing.T) {
			src := genTiny(t, tc.arch, nil)
			dst := filepath.Join(t.TempDir(), "out")
			sum, err := Convert(context.Background(), src, dst, Options{Bits: tc.bits, GroupSize: tc.group})
			if err != nil {
				t.Fatal(err)
			}
			in, _ := safetensors.OpenDir(src)
			defer in.Close()
			out, err := safetensors.OpenDir(dst)
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()

			// Every 2-D weight is quantized: 7 per layer, embeddings and lm_head.
			if want := 7*2 + 2; len(sum.Quantized) != want {
				t.Fatalf("%d weights quantized, want %d: %v", len(sum.Quantized), want, sum.Quantized)
			}
			for _, name := range in.Names() {
				src, _ := in.Tensor(name)
				if len(src.Shape) == 1 {
					o, ok := out.Tensor(name)
					if !ok || o.DType != safetensors.F32 || !slices.Equal(o.Shape, src.Shape) {
						t.Fatalf("%s not kept as F32 %v", name, src.Shape)
					}
					continue
				}
				rows, cols := src.Shape[0], src.Shape[1]
				base := strings.TrimSuffix(name, ".weight")
				w, _ := out.Tensor(name)
				s, _ := out.Tensor(base + ".scales")
				b, _ := out.Tensor(base + ".biases")
				if w == nil || s == nil || b == nil {
					t.Fatalf("%s: missing weight, scales or biases", name)
				}
				if w.DType != safetensors.U32 || !slices.Equal(w.Shape, []int{rows, cols * tc.bits / 32}) {
					t.Fatalf("%s: %s %v, want U32 [%d %d]", name, w.DType, w.Shape, rows, cols*tc.bits/32)
				}
				if !slices.Equal(s.Shape, []int{rows, cols / tc.group}) || s.DType != safetensors.F32 || b.DType != safetensors.F32 {
					t.Fatalf("%s: scales %s %v", name, s.DType, s.Shape)
				}
				orig, _ := src.Float32s()
				scales, _ := s.Float32s()
				biases, _ := b.Float32s()
				// Codes, scales and biases agree: each code is the rounded, clamped
				// (w-bias)/scale of the original weight (MLX makes one edge of each group
				// exact, so the other may clamp: compare codes, not values).
				rowBytes := cols * tc.bits / 8
				top := float64(int(1)<<tc.bits - 1)
				for r := range rows {
					row := w.Data[r*rowBytes : (r+1)*rowBytes]
					for c := range cols {
						g := r*(cols/tc.group) + c/tc.group
						x := (float64(orig[r*cols+c]) - float64(biases[g])) / float64(scales[g])
						want := math.Min(math.Max(math.RoundToEven(x), 0), top)
						if got := float64(code(row, c, tc.bits)); got != want && math.Abs(math.Abs(x-math.Floor(x))-0.5) > 1e-3 {
							t.Fatalf("%s[%d,%d]: code %v, want %v ((w-bias)/scale = %g)", name, r, c, got, want, x)
						}
					}
				}
			}
			cfg := readConfig(t, dst)
			q, _ := cfg["quantization"].(map[string]any)
			if q["bits"] != float64(tc.bits) || q["group_size"] != float64(tc.group) || q["mode"] != "affine" {
				t.Fatalf("quantization block %v", cfg["quantization"])
			}
			if _, ok := cfg["quantization_config"]; !ok {
				t.Fatal("no quantization_config")
			}
			if _, err := os.Stat(filepath.Join(dst, safetensors.IndexFile)); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dst, "generation_config.json")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A bfloat16 checkpoint stays bfloat16 (scales and biases too); --dtype overrides it;
// tied lm_head and rotary buffers are dropped; a layer whose width is not a multiple
// of the group stays unquantized.
func TestDTypeTiedAndUnquantizable(t *testing.T) {
	src := genTiny(t, "llama", func(c *randmodel.Config) {
		c.DType = "bfloat16"
		c.TieWordEmbeddings = true
		c.IntermediateSize = 96 // down_proj's input is 96: not a multiple of 64
	})
	// Add what HF checkpoints sometimes carry: an lm_head despite tying, an inv_freq buffer.
	extra := []safetensors.Tensor{
		{TensorInfo: safetensors.TensorInfo{Name: "lm_head.weight", DType: safetensors.BF16, Shape: []int{256, 128}}, Data: make([]byte, 256*128*2)},
		{TensorInfo: safetensors.TensorInfo{Name: "model.layers.0.self_attn.rotary_emb.inv_freq", DType: safetensors.F32, Shape: []int{16}}, Data: make([]byte, 64)},
	}
	if err := safetensors.Write(filepath.Join(src, "extra.safetensors"), extra, nil); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	sum, err := Convert(context.Background(), src, dst, Options{Bits: 4})
	if err != nil {
		t.Fatal(err)
	}
	if sum.DType != "bfloat16" || len(sum.Dropped) != 2 {
		t.Fatalf("summary %+v", sum)
	}
	out, _ := safetensors.OpenDir(dst)
	defer out.Close()
	if _, ok := out.Tensor("lm_head.weight"); ok {
		t.Fatal("tied lm_head kept")
	}
	d, _ := out.Tensor("model.layers.0.mlp.down_proj.weight")
	if d.DType != safetensors.BF16 || !slices.Equal(d.Shape, []int{128, 96}) {
		t.Fatalf("down_proj with width 96 should stay bf16 [128 96], got %s %v", d.DType, d.Shape)
	}
	if _, ok := out.Tensor("model.layers.0.mlp.down_proj.scales"); ok {
		t.Fatal("down_proj has scales")
	}
	s, _ := out.Tensor("model.embed_tokens.scales")
	if s.DType != safetensors.BF16 {
		t.Fatalf("scales of a bf16 model are %s", s.DType)
	}
	// Scales come from the bf16-rounded weights and are themselves bf16.
	in, _ := safetensors.OpenDir(src)
	defer in.Close()
	e, _ := in.Tensor("model.embed_tokens.weight")
	ev, _ := e.Float32s()
	sv, _ := s.Float32s()
	lo, hi := ev[0], ev[0]
	for _, v := range ev[:64] {
		lo, hi = min(lo, v), max(hi, v)
	}
	if half.BF16ToF32(half.F32ToBF16(sv[0])) != sv[0] {
		t.Fatalf("scale %g is not a bf16 value", sv[0])
	}
	if want := float64(hi-lo) / 15; math.Abs(math.Abs(float64(sv[0]))-want) > 0.25*want {
		t.Fatalf("first scale %g, want about ±%g", sv[0], want)
	}

	dst16 := filepath.Join(t.TempDir(), "out")
	if _, err := Convert(context.Background(), src, dst16, Options{DType: "float16"}); err != nil {
		t.Fatal(err)
	}
	o16, _ := safetensors.OpenDir(dst16)
	defer o16.Close()
	n, _ := o16.Tensor("model.norm.weight")
	if n.DType != safetensors.F16 {
		t.Fatalf("--dtype float16 wrote %s", n.DType)
	}
	if _, ok := readConfig(t, dst16)["quantization"]; ok {
		t.Fatal("unquantized conversion wrote a quantization block")
	}
	// Values survive the cast within fp16 precision.
	ni, _ := in.Tensor("model.norm.weight")
	a, _ := ni.Float32s()
	b, _ := n.Float32s()
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-2 {
			t.Fatalf("norm[%d]: %g became %g", i, a[i], b[i])
		}
	}
}

func TestShards(t *testing.T) {
	src := genTiny(t, "qwen3", nil)
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := Convert(context.Background(), src, dst, Options{Bits: 8, GroupSize: 32, MaxShardBytes: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	shards, _ := filepath.Glob(filepath.Join(dst, "model-*-of-*.safetensors"))
	if len(shards) < 3 {
		t.Fatalf("expected several shards, got %v", shards)
	}
	raw, _ := os.ReadFile(filepath.Join(dst, safetensors.IndexFile))
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	json.Unmarshal(raw, &idx)
	ck, err := safetensors.OpenDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if len(idx.WeightMap) != len(ck.Names()) {
		t.Fatalf("index has %d tensors, shards %d", len(idx.WeightMap), len(ck.Names()))
	}
	// A weight and its scales and biases share a shard.
	if a, b := idx.WeightMap["model.layers.1.mlp.up_proj.weight"], idx.WeightMap["model.layers.1.mlp.up_proj.biases"]; a != b || a == "" {
		t.Fatalf("weight in %q, biases in %q", a, b)
	}
}

func TestRefusals(t *testing.T) {
	ctx := context.Background()
	src := genTiny(t, "qwen2", nil)
	q := filepath.Join(t.TempDir(), "q")
	if _, err := Convert(ctx, src, q, Options{Bits: 4}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, src string
		opts      Options
		want      string
	}{
		{"already quantized", q, Options{Bits: 4}, "already"},
		{"bad bits", src, Options{Bits: 7}, "7-bit"},
		{"bad group", src, Options{Bits: 4, GroupSize: 48}, "group"},
		{"bad dtype", src, Options{DType: "int8"}, "dtype"},
		{"no checkpoint", t.TempDir(), Options{}, "config.json"},
	} {
		_, err := Convert(ctx, tc.src, filepath.Join(t.TempDir(), "o"), tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
	// Integer weights.
	bad := genTiny(t, "llama", nil)
	ints := []safetensors.Tensor{{TensorInfo: safetensors.TensorInfo{Name: "model.extra", DType: safetensors.I32, Shape: []int{4}}, Data: make([]byte, 16)}}
	safetensors.Write(filepath.Join(bad, "ints.safetensors"), ints, nil)
	if _, err := Convert(ctx, bad, filepath.Join(t.TempDir(), "o"), Options{}); err == nil || !strings.Contains(err.Error(), "model.extra") {
		t.Errorf("integer tensor: %v", err)
	}
	// Mistral's tekken.json without a tokenizer.json.
	tekken := genTiny(t, "mistral", nil)
	os.WriteFile(filepath.Join(tekken, "tekken.json"), []byte(`{}`), 0o644)
	if _, err := Convert(ctx, tekken, filepath.Join(t.TempDir(), "o"), Options{}); err == nil || !strings.Contains(err.Error(), "tekken.json but no tokenizer.json") {
		t.Errorf("tekken.json only: %v", err)
	}
	// A non-empty output directory.
	if _, err := Convert(ctx, src, q, Options{}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("non-empty output: %v", err)
	}
}

func TestParseQuantize(t *testing.T) {
	for s, want := range map[string]int{"": 0, "q2": 2, "Q3": 3, "q4": 4, "q5": 5, "q6": 6, "q8": 8} {
		if got, err := ParseQuantize(s); err != nil || got != want {
			t.Errorf("ParseQuantize(%q) = %d, %v", s, got, err)
		}
	}
	for _, s := range []string{"q7", "q4_K_M", "4", "q", "q16"} {
		if _, err := ParseQuantize(s); err == nil {
			t.Errorf("ParseQuantize(%q) accepted", s)
		}
	}
}

func TestCreateIntoStore(t *testing.T) {
	store := &registry.Store{HubCache: t.TempDir(), Home: t.TempDir()}
	src := genTiny(t, "qwen3", nil)
	name, err := registry.ParseName("tiny-q4")
	if err != nil {
		t.Fatal(err)
	}
	m, sum, err := Create(context.Background(), store, name, src, Options{Bits: 4, GroupSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	if sum.BitsPerWeight < 4 || sum.BitsPerWeight > 6 {
		t.Fatalf("%.2f bits per weight for q4 g64 with fp32 scales", sum.BitsPerWeight)
	}
	got, err := store.Resolve(name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Commit != m.Commit {
		t.Fatalf("resolved commit %s, created %s", got.Commit, m.Commit)
	}
	if _, ok := readConfig(t, got.Dir)["quantization"]; !ok {
		t.Fatal("stored model has no quantization block")
	}
	ck, err := safetensors.OpenDir(got.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	w, _ := ck.Tensor("model.embed_tokens.weight")
	if w.DType != safetensors.U32 || binary.LittleEndian.Uint32(w.Data) == 0 && binary.LittleEndian.Uint32(w.Data[4:]) == 0 {
		t.Fatalf("stored embeddings: %s", w.DType)
	}
}

// A sharded source (model.safetensors.index.json) converts like a single file.
func TestShardedSource(t *testing.T) {
	cfg := randmodel.Tiny("qwen2", 256)
	one, many := t.TempDir(), t.TempDir()
	if err := randmodel.Generate(one, cfg, randmodel.Options{Seed: 9}); err != nil {
		t.Fatal(err)
	}
	if err := randmodel.Generate(many, cfg, randmodel.Options{Seed: 9, MaxShardBytes: 100 << 10}); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	if _, err := Convert(context.Background(), one, a, Options{Bits: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := Convert(context.Background(), many, b, Options{Bits: 4}); err != nil {
		t.Fatal(err)
	}
	x, _ := os.ReadFile(filepath.Join(a, "model.safetensors"))
	y, _ := os.ReadFile(filepath.Join(b, "model.safetensors"))
	if len(x) == 0 || string(x) != string(y) {
		t.Fatal("converting a sharded checkpoint gave different weights")
	}
}

func TestProgress(t *testing.T) {
	src := genTiny(t, "llama", nil)
	var calls [][2]int
	_, err := Convert(context.Background(), src, filepath.Join(t.TempDir(), "o"), Options{Bits: 4,
		Progress: func(done, total int) { calls = append(calls, [2]int{done, total}) }})
	if err != nil {
		t.Fatal(err)
	}
	n := len(randmodel.Tiny("llama", 256).Tensors())
	if len(calls) != n || calls[len(calls)-1] != [2]int{n, n} || calls[0] != [2]int{1, n} {
		t.Fatalf("progress calls %v for %d tensors", calls, n)
	}
}
