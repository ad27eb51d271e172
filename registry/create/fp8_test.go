package create

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
)

func TestE4M3(t *testing.T) {
	for b, want := range map[byte]float32{0x00: 0, 0x38: 1, 0xb8: -1, 0x7e: 448, 0x01: 1.0 / 512, 0x08: 1.0 / 64, 0x3c: 1.5} {
		if e4m3[b] != want {
			t.Errorf("e4m3[%#x] = %v, want %v", b, e4m3[b], want)
		}
	}
	if !math.IsNaN(float64(e4m3[0x7f])) || !math.IsNaN(float64(e4m3[0xff])) {
		t.Error("0x7f and 0xff are not NaN")
	}
}

// TestFP8Checkpoint: a checkpoint whose linear weights are F8_E4M3 with scales (a scale per
// tensor as Ministral 3 ships them, and one per block of 16×32 as weight_block_size gives)
// converts to the same bytes as the same weights given dequantized in float32, with and
// without quantization; the scales and static activation scales are dropped and the
// quantization_config goes.
func TestFP8Checkpoint(t *testing.T) {
	src := t.TempDir()
	if err := randmodel.Generate(src, randmodel.TinyMistral3(256), randmodel.Options{Seed: 9}); err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	var fp8, ref []safetensors.Tensor
	f32 := func(name string, shape []int, v []float32) safetensors.Tensor {
		data := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
		}
		return safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: safetensors.F32, Shape: shape}, Data: data}
	}
	blocked := false
	for _, n := range ck.Names() {
		st, _ := ck.Tensor(n)
		vals, err := st.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(n, "layers.") || !strings.HasSuffix(n, "_proj.weight") {
			fp8 = append(fp8, f32(n, st.Shape, vals))
			ref = append(ref, f32(n, st.Shape, vals))
			continue
		}
		R, C := st.Shape[0], st.Shape[1]
		br, bc, sr, sc := R, C, 1, 1 // one scale
		if blocked = !blocked; blocked {
			br, bc, sr, sc = 16, 32, (R+15)/16, (C+31)/32
		}
		scales := make([]float32, sr*sc)
		for i, v := range vals {
			s := &scales[(i/C/br)*sc+(i%C)/bc]
			*s = max(*s, float32(math.Abs(float64(v)))/448)
		}
		codes, deq := make([]byte, len(vals)), make([]float32, len(vals))
		for i, v := range vals {
			s := scales[(i/C/br)*sc+(i%C)/bc]
			best := 0
			for b := range 256 {
				if !math.IsNaN(float64(e4m3[b])) && math.Abs(float64(e4m3[b]*s-v)) < math.Abs(float64(e4m3[best]*s-v)) {
					best = b
				}
			}
			codes[i], deq[i] = byte(best), e4m3[best]*s
		}
		fp8 = append(fp8,
			safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: n, DType: safetensors.F8E4M3, Shape: st.Shape}, Data: codes},
			f32(n+"_scale_inv", []int{sr, sc}, scales),
			f32(strings.TrimSuffix(n, "weight")+"activation_scale", []int{}, []float32{0.5}))
		ref = append(ref, f32(n, st.Shape, deq))
	}
	ck.Close()
	srcs := map[string]string{}
	for name, ts := range map[string][]safetensors.Tensor{"fp8": fp8, "ref": ref} {
		d := filepath.Join(t.TempDir(), name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := safetensors.Write(filepath.Join(d, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		cfg := readConfig(t, src)
		if name == "fp8" {
			cfg["quantization_config"] = map[string]any{"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": nil,
				"modules_to_not_convert": []string{"model.vision_tower", "model.multi_modal_projector", "lm_head"}}
		}
		raw, _ := json.Marshal(cfg)
		if err := os.WriteFile(filepath.Join(d, "config.json"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		srcs[name] = d
	}
	for _, opts := range []Options{{}, {Bits: 4, GroupSize: 32}} {
		out := map[string]string{}
		for _, name := range []string{"fp8", "ref"} {
			out[name] = filepath.Join(t.TempDir(), name)
			sum, err := Convert(context.Background(), srcs[name], out[name], opts)
			if err != nil {
				t.Fatal(err)
			}
			if name == "fp8" && len(sum.Dropped) != 5+2*14 { // the vision stubs; 14 linears' two scales each
				t.Errorf("dropped %d tensors: %v", len(sum.Dropped), sum.Dropped)
			}
		}
		a, _ := safetensors.OpenDir(out["fp8"])
		b, _ := safetensors.OpenDir(out["ref"])
		if len(a.Names()) != len(b.Names()) {
			t.Fatalf("bits %d: %d tensors from FP8, %d from float", opts.Bits, len(a.Names()), len(b.Names()))
		}
		for _, n := range b.Names() {
			x, ok := a.Tensor(n)
			y, _ := b.Tensor(n)
			if !ok || !bytes.Equal(x.Data, y.Data) || x.DType != y.DType {
				t.Errorf("bits %d: %s differs between the FP8 and the float conversions", opts.Bits, n)
			}
		}
		a.Close()
		b.Close()
		if cfg := readConfig(t, out["fp8"]); cfg["quantization_config"] != nil && opts.Bits == 0 {
			t.Errorf("the FP8 quantization_config was kept: %v", cfg["quantization_config"])
		}
	}
}
