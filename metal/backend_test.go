package metal_test

import (
	"context"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/metal"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/backend"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	_ "github.com/mlxg/mlxg/runner/model/all"
)

// These tests run the MLX backend on MLX itself (metal/mlxtest: an installed
// libmlxc; on Linux MLX's CPU backend), against the CPU backend and the plain
// references of `mlxg doctor`.

var _ compute.Backend = (*metal.Backend)(nil)

// tolLogits bounds the relative difference of a model's logits from the CPU
// backend's over quantized KV caches, whose rounding a tiny difference can tip.
const tolLogits = 3e-2

// tinyQwen3 writes doctor's tiny float32 qwen3 into dir and returns its folder.
func tinyQwen3(t *testing.T, dir string, seed uint64) string {
	t.Helper()
	m := backend.TinyModelsOf(dir, "qwen3", seed, backend.ModelFormats[0])[0]
	if m.Uncovered != "" || m.Err != nil {
		t.Fatalf("%s: %s %v", m.Name(), m.Uncovered, m.Err)
	}
	return m.Dir
}

func TestTinyModelOnRealMLX(t *testing.T) {
	open, p := mlxtest.Opener(t), precision(mlxtest.Backend(t))
	for _, m := range backend.TinyModels(t.TempDir(), 5) {
		res := backend.CheckModel(m, open, func() (compute.Backend, error) { return cpu.New(2), nil }, p)
		if m.Format.Name == "4-bit" {
			res = append(res, backend.CheckStreaming(m, open, p))
		}
		for _, r := range res {
			if !r.OK() && r.Uncovered == "" {
				t.Errorf("%s vs %s: relative error %.3g (tolerance %.0e), %v", r.Check, r.Against, r.RelErr, r.Tol, r.Err)
			}
		}
	}

	// The checkpoints with a vision tower, with images: the towers' operations (Gemma
	// 4's clamps too) and Gemma 3's and Gemma 4's attention among an image's rows (on
	// Gemma 4's KV-shared layers too) against the CPU backend.
	for _, m := range backend.TinyVisionModels(t.TempDir(), 5) {
		for _, r := range backend.CheckVisionModel(m, open, func() (compute.Backend, error) { return cpu.New(2), nil }, p) {
			if !r.OK() {
				t.Errorf("%s vs %s: relative error %.3g (tolerance %.0e), %v", r.Check, r.Against, r.RelErr, r.Tol, r.Err)
			}
		}
	}

	dir := tinyQwen3(t, t.TempDir(), 5)

	lib := mlxtest.Lib(t)
	before, err := lib.Memory()
	if err != nil {
		t.Fatal(err)
	}
	b, err := metal.NewBackend(lib)
	if err != nil {
		t.Fatal(err)
	}
	// One evaluation per forward pass, prefill or decode.
	m, err := model.Load(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	caches, err := m.NewCaches(false)
	if err != nil {
		t.Fatal(err)
	}
	evals := b.Evals()
	if _, err := m.Forward(context.Background(), []int32{3, 1, 4, 1, 5}, caches, false); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int32{9, 2, 6} {
		if _, err := m.Forward(context.Background(), []int32{id}, caches, false); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.Evals() - evals; n != 4 {
		t.Errorf("%d mlx_eval calls for 4 forward passes, want 4", n)
	}
	if got := caches[0].Len(); got != 8 {
		t.Errorf("the layer caches hold %d positions, want 8", got)
	}
	if err := b.Close(); err != nil { // before the model: the weights wrap its mmap
		t.Fatal(err)
	}
	m.Close()
	after, err := lib.Memory()
	if err != nil {
		t.Fatal(err)
	}
	if after.Active > before.Active {
		t.Errorf("MLX holds %d bytes after Close, %d before the backend started", after.Active, before.Active)
	}
}

// A quantized layer starts in fp16 and converts at quantized_kv_start; a layer filled
// elsewhere (a restored prefix) is read in place like any other. Both must match the
// CPU backend step by step.
func TestKVConversionsAndRestoredPrefix(t *testing.T) {
	dir := tinyQwen3(t, t.TempDir(), 6)
	b := mlxtest.Backend(t)
	for _, spec := range []kvstore.Spec{{K: kvstore.AffineFormat(8, 32), V: kvstore.AffineFormat(4, 32)},
		{K: kvstore.AffineFormat(8, 32).Rotate(true), V: kvstore.AffineFormat(4, 32).Rotate(true)}} {
		kvConversions(t, dir, b, spec)
	}
}

func kvConversions(t *testing.T, dir string, b compute.Backend, spec kvstore.Spec) {
	run := func(be interface {
		Name() string
	}, m *model.Model, restore bool) [][]float32 {
		var caches []kvstore.Layer
		for range m.Config.NumLayers {
			c, err := kvstore.NewQuantized(m.Config.NumKVHeads, m.Config.HeadDim, m.Config.HeadDim, spec, 4)
			if err != nil {
				t.Fatal(err)
			}
			caches = append(caches, c)
		}
		var out [][]float32
		steps := [][]int32{{7, 8, 9}, {10}, {11}, {12, 13}, {14}}
		for i, s := range steps {
			if restore && i == 0 {
				// The prefix comes from another backend, as if restored from the SSD tier.
				cm, err := model.Load(dir, cpu.New(1))
				if err != nil {
					t.Fatal(err)
				}
				l, err := cm.Forward(context.Background(), s, caches, false)
				cm.Close()
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, l)
				continue
			}
			l, err := m.Forward(context.Background(), s, caches, false)
			if err != nil {
				t.Fatalf("%s step %d: %v", be.Name(), i, err)
			}
			out = append(out, l)
		}
		return out
	}
	cm, err := model.Load(dir, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	mm, err := model.Load(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	defer mm.Close()
	want := run(cpu.New(2), cm, false)
	for _, restore := range []bool{false, true} {
		got := run(b, mm, restore)
		for i := range want {
			var diff, scale float64
			for j := range want[i] {
				d := float64(got[i][j] - want[i][j])
				diff, scale = max(diff, d, -d), max(scale, float64(want[i][j]), -float64(want[i][j]))
			}
			if diff/scale > tolLogits {
				t.Errorf("%v restore=%v step %d: relative error %.3g", spec, restore, i, diff/scale)
			}
		}
	}
}

// A closed backend answers with an error, never a panic.
func TestClosedBackend(t *testing.T) {
	b := mlxtest.Backend(t)
	data := make([]byte, 4*2*3)
	w, err := b.Weight(source{"w.weight": {TensorInfo: safetensors.TensorInfo{Name: "w.weight", DType: safetensors.F32, Shape: []int{2, 3}, End: 24}, Data: data}}, "w", compute.Quant{})
	if err != nil {
		t.Fatal(err)
	}
	c := b.NewContext()
	x := c.Embed(w, []int32{1})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if _, err := c.Float32s(x); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("a context of a closed backend evaluated: %v", err)
	}
	c.Close()
}

type source map[string]*safetensors.Tensor

func (s source) Tensor(name string) (*safetensors.Tensor, bool) { t, ok := s[name]; return t, ok }

// Past kvstore.BlockTokens positions attention reads several blocks, the last one
// partly filled, and a truncated layer shrinks under it: attention must not notice,
// in fp16 or quantized.
func TestAttentionAcrossBlocks(t *testing.T) {
	a := kvstore.AffineFormat
	specs := []kvstore.Spec{kvstore.SpecF16, {K: a(8, 32), V: a(4, 32)},
		// The layouts besides K8/V4: rotated keys and/or values (MLX rotates the queries,
		// the step's rows and the output), groups of 16 (attended in Go), 6 and 5 bits.
		{K: a(8, 32).Rotate(true), V: a(4, 32)}, {K: a(8, 32), V: a(4, 32).Rotate(true)},
		{K: a(8, 32).Rotate(true), V: a(4, 32).Rotate(true)}, {K: a(8, 32), V: a(4, 16)},
		{K: a(8, 32), V: a(6, 32)}, {K: a(8, 32), V: a(5, 32)},
		// 6-bit keys and values, rotated and not (the CPU backend's fused 6-bit kernels
		// against MLX's quantized_matmul on the same codes).
		{K: a(6, 32), V: a(6, 32)}, {K: a(6, 32).Rotate(true), V: a(6, 32).Rotate(true)},
		{K: kvstore.FormatQ4_0.Rotate(true), V: kvstore.FormatQ4_0.Rotate(true)}}
	attentionAcrossBlocks(t, 32, specs)
}

// The policy's layouts at their own groups of 64: K8/V8 and K6h/V6h (its default) and
// the 4-bit steps, over a head_dim of 64 as qwen3-tiny's.
func TestAttentionPolicyLayouts(t *testing.T) {
	a := kvstore.AffineFormat
	attentionAcrossBlocks(t, 64, []kvstore.Spec{{K: a(8, 64), V: a(8, 64)},
		{K: a(6, 64).Rotate(true), V: a(6, 64).Rotate(true)}, {K: a(4, 64), V: a(4, 32)}})
}

// attentionAcrossBlocks compares MLX with the CPU backend over caches of each spec, 2 KV
// heads and 4 query heads of dim, appended and truncated across a block's end.
func attentionAcrossBlocks(t *testing.T, dim int, specs []kvstore.Spec) {
	const kvHeads, heads, total = 2, 4, kvstore.BlockTokens + 20 // rows of inputs
	src := source{}
	put := func(name string, rows, cols int, seed int) {
		data := make([]byte, 4*rows*cols)
		for i := 0; i < rows*cols; i++ {
			// A fixed pseudo-random pattern on the 8/4-bit affine grids would be
			// overkill here: the Go cache quantizes the same float32 values.
			v := float32((i*7919+seed*104729)%2003)/1001.5 - 1
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
		src[name+".weight"] = &safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name + ".weight", DType: safetensors.F32, Shape: []int{rows, cols}, End: int64(len(data))}, Data: data}
	}
	put("q", total, heads*dim, 1)
	put("k", total, kvHeads*dim, 2)
	put("v", total, kvHeads*dim, 3)
	scale := float32(1 / math.Sqrt(float64(dim)))
	// Runs of positions to append, crossing the block boundary one position at a
	// time; a negative entry truncates the cache by that many first (a rewind, as
	// generation does on a shorter prefix match), then appends one.
	steps := []int{kvstore.BlockTokens - 3, 2, 1, -3, 1, 2, 19}
	for _, spec := range specs {
		run := func(b compute.Backend) [][]float32 {
			var cache kvstore.Layer
			var err error
			if spec == kvstore.SpecF16 {
				cache, err = kvstore.NewFull(kvHeads, dim, dim, false)
			} else {
				cache, err = kvstore.NewQuantized(kvHeads, dim, dim, spec, 0)
			}
			if err != nil {
				t.Fatal(err)
			}
			var w [3]compute.Weight
			for i, n := range []string{"q", "k", "v"} {
				if w[i], err = b.Weight(src, n, compute.Quant{}); err != nil {
					t.Fatal(err)
				}
			}
			var out [][]float32
			pos := 0
			for _, n := range steps {
				if n < 0 {
					pos += n
					if err := cache.Truncate(pos); err != nil {
						t.Fatal(err)
					}
					n = 1
				}
				ids := make([]int32, n)
				for i := range ids {
					ids[i] = int32(pos + i)
				}
				c := b.NewContext()
				got, err := c.Float32s(c.Attention(c.Embed(w[0], ids), c.Embed(w[1], ids), c.Embed(w[2], ids), cache, heads, scale))
				c.Close()
				if err != nil {
					t.Fatalf("%s at %d: %v", b.Name(), pos, err)
				}
				out = append(out, got)
				pos += n
			}
			if cache.Len() != pos || pos != total {
				t.Fatalf("%s: the cache holds %d positions, want %d", b.Name(), cache.Len(), pos)
			}
			return out
		}
		mb := mlxtest.Backend(t)
		got, want := run(mb), run(cpu.New(2))
		for i := range want {
			var diff, scale float64
			for j := range want[i] {
				diff = max(diff, math.Abs(float64(got[i][j]-want[i][j])))
				scale = max(scale, math.Abs(float64(want[i][j])))
			}
			if diff/scale > tolLogits {
				t.Errorf("%v step %d: relative error %.3g", spec, i, diff/scale)
			}
		}
	}
}
