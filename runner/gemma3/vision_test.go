package gemma3_test

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

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/gemma3"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/vision"
)

// smallVision is TinyGemma3Vision with image tokens inside a vocabulary of 256.
func smallVision() randmodel.Gemma3Vision {
	v := randmodel.TinyGemma3Vision()
	v.Image, v.BOI, v.EOI = 250, 251, 252
	return v
}

// visionModel writes TinyGemma3 (vocabulary 256, a sliding window of 8: shorter than an
// image's 16 tokens) as a multimodal Gemma 3 with a random tower in mlx-vlm's layout, and
// loads it on the CPU backend.
func visionModel(t testing.TB) *model.Model { return visionModelWith(t, smallVision(), 2) }

// visionModelWith is visionModel with a tower of shape v, on threads threads.
func visionModelWith(t testing.TB, v randmodel.Gemma3Vision, threads int) *model.Model {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "gemma3v")
	if err := randmodel.Generate(dir, randmodel.TinyGemma3(256), randmodel.Options{Seed: 6}); err != nil {
		t.Fatal(err)
	}
	if err := randmodel.AddGemma3Vision(dir, v, 9, false); err != nil {
		t.Fatal(err)
	}
	return modeltest.LoadVision(t, dir, cpu.New(threads))
}

// testImage is a w×h image whose pixels depend on seed.
var testImage = modeltest.Image

// towerRef is transformers' Gemma 3 image features in float64 from the checkpoint's
// tensors: patches row-major through the SigLIP tower, AvgPool2d, Gemma's RMSNorm and
// the projection (Gemma3MultiModalProjector).
func towerRef(t *testing.T, dir string, v randmodel.Gemma3Vision, px []float32, text int) []float64 {
	t.Helper()
	get := modeltest.Float64s(t, dir, "")
	p := "vision_tower.vision_model."
	S, P, C, H := v.ImageSize, v.Patch, v.Channels, v.Hidden
	g := S / P
	N := g * g
	// MLX's kernel is [out, P, P, C].
	kern, bias, pos := get(p+"embeddings.patch_embedding.weight"), get(p+"embeddings.patch_embedding.bias"), get(p+"embeddings.position_embedding.weight")
	x := make([][]float64, N)
	for py := range g {
		for pxx := range g {
			row := make([]float64, H)
			for o := range H {
				s := bias[o]
				for y := range P {
					for xx := range P {
						for c := range C {
							s += kern[((o*P+y)*P+xx)*C+c] * float64(px[c*S*S+(py*P+y)*S+pxx*P+xx])
						}
					}
				}
				row[o] = s + pos[(py*g+pxx)*H+o]
			}
			x[py*g+pxx] = row
		}
	}
	ln := func(in []float64, w, b []float64) []float64 {
		var mean, vr float64
		for _, a := range in {
			mean += a
		}
		mean /= float64(len(in))
		for _, a := range in {
			vr += (a - mean) * (a - mean)
		}
		inv := 1 / math.Sqrt(vr/float64(len(in))+v.Eps)
		out := make([]float64, len(in))
		for i, a := range in {
			out[i] = (a-mean)*inv*w[i] + b[i]
		}
		return out
	}
	lin := func(in []float64, w, b []float64, o int) []float64 {
		out := make([]float64, o)
		for j := range o {
			s := b[j]
			for i, a := range in {
				s += w[j*len(in)+i] * a
			}
			out[j] = s
		}
		return out
	}
	gelu := func(a float64) float64 { return 0.5 * a * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(a+0.044715*a*a*a))) }
	hd := H / v.Heads
	for l := range v.Layers {
		b := p + "encoder.layers." + string(rune('0'+l)) + "."
		w := func(n string) []float64 { return get(b + n) }
		q, k, vv := make([][]float64, N), make([][]float64, N), make([][]float64, N)
		for i := range N {
			y := ln(x[i], w("layer_norm1.weight"), w("layer_norm1.bias"))
			q[i] = lin(y, w("self_attn.q_proj.weight"), w("self_attn.q_proj.bias"), H)
			k[i] = lin(y, w("self_attn.k_proj.weight"), w("self_attn.k_proj.bias"), H)
			vv[i] = lin(y, w("self_attn.v_proj.weight"), w("self_attn.v_proj.bias"), H)
		}
		for i := range N {
			att := make([]float64, H)
			for h := range v.Heads {
				sc := make([]float64, N)
				mx := math.Inf(-1)
				for j := range N {
					var d float64
					for e := range hd {
						d += q[i][h*hd+e] * k[j][h*hd+e]
					}
					sc[j] = d / math.Sqrt(float64(hd))
					mx = max(mx, sc[j])
				}
				var sum float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				for j := range N {
					for e := range hd {
						att[h*hd+e] += sc[j] / sum * vv[j][h*hd+e]
					}
				}
			}
			o := lin(att, w("self_attn.out_proj.weight"), w("self_attn.out_proj.bias"), H)
			for e := range H {
				x[i][e] += o[e]
			}
			y := ln(x[i], w("layer_norm2.weight"), w("layer_norm2.bias"))
			f := lin(y, w("mlp.fc1.weight"), w("mlp.fc1.bias"), v.Intermediate)
			for e := range f {
				f[e] = gelu(f[e])
			}
			f = lin(f, w("mlp.fc2.weight"), w("mlp.fc2.bias"), H)
			for e := range H {
				x[i][e] += f[e]
			}
		}
	}
	for i := range N {
		x[i] = ln(x[i], get(p+"post_layernorm.weight"), get(p+"post_layernorm.bias"))
	}
	side := int(math.Sqrt(float64(v.Tokens)))
	kk := g / side
	norm, proj := get("multi_modal_projector.mm_soft_emb_norm.weight"), get("multi_modal_projector.mm_input_projection_weight")
	var out []float64
	for ty := range side {
		for tx := range side {
			pooled := make([]float64, H)
			for dy := range kk {
				for dx := range kk {
					for e := range H {
						pooled[e] += x[(ty*kk+dy)*g+tx*kk+dx][e]
					}
				}
			}
			var ms float64
			for e := range H {
				pooled[e] /= float64(kk * kk)
				ms += pooled[e] * pooled[e]
			}
			inv := 1 / math.Sqrt(ms/float64(H)+v.Eps)
			for e := range H {
				pooled[e] *= inv * (1 + norm[e])
			}
			for j := range text {
				var s float64
				for e := range H {
					s += pooled[e] * proj[e*text+j]
				}
				out = append(out, s)
			}
		}
	}
	return out
}

// TestTowerReference: the tower and projector on the CPU backend compute what a plain
// float64 reference of transformers' modules computes from the same tensors, for images
// of odd sizes (resized to the tower's 32×32, Pillow's bilinear); images encoded together
// give each one's features alone, bit for bit.
func TestTowerReference(t *testing.T) {
	m := visionModel(t)
	v := smallVision()
	imgs := []vision.Image{testImage(37, 21, 1), testImage(32, 32, 2), testImage(50, 90, 3)}
	both, err := m.EncodeImages(context.Background(), imgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, im := range imgs {
		px, err := m.Vision().Processor().Process(im.RGB)
		if err != nil {
			t.Fatal(err)
		}
		want := towerRef(t, m.Dir, v, px.Values, m.Config.HiddenSize)
		got := both[i]
		if got.Grid != [3]int{1, 4, 4} || len(got.Rows) != len(want) {
			t.Fatalf("image %d: grid %v, %d values; want 4×4 tokens of %d", i, got.Grid, len(got.Rows), m.Config.HiddenSize)
		}
		var num, den float64
		for j := range want {
			num = max(num, math.Abs(float64(got.Rows[j])-want[j]))
			den = max(den, math.Abs(want[j]))
		}
		if num/den > 1e-5 {
			t.Errorf("image %d: features differ from the reference by %.3g (relative to the largest)", i, num/den)
		}
		alone, err := m.EncodeImages(context.Background(), []vision.Image{im})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(alone[0].Rows, got.Rows) {
			t.Errorf("image %d: batched features differ from alone (%.3g)", i, modeltest.MaxRel(alone[0].Rows, got.Rows))
		}
	}
	if slices.Equal(both[0].Rows, both[1].Rows) {
		t.Error("different images gave the same features")
	}
}

// TestEncodeTime logs the time to preprocess and encode one 1024×768 image on the CPU
// backend (2 threads) with a tiny tower of Gemma 3's geometry (896×896 pixels in 14-pixel
// patches, pooled to 256 tokens; 2 layers of width 32): 4,096 patches.
func TestEncodeTime(t *testing.T) {
	v := smallVision()
	v.ImageSize, v.Patch, v.Tokens = 896, 14, 256
	m := visionModelWith(t, v, 2)
	sp, pre, took := modeltest.EncodeTime(t, m)
	if sp.N() != 256 {
		t.Fatalf("%d tokens", sp.N())
	}
	t.Logf("1024×768 on the CPU backend (2 threads), tower of %d layers × %d wide: 4096 patches, %d tokens in %v (preprocessing alone %v)",
		v.Layers, v.Hidden, sp.N(), took, pre)
}

// TestQuantizedTower: a tower whose linear layers and position embedding are stored in
// MLX's 8-bit affine mode (as mlx-vlm may quantize them with the language model) loads and
// encodes close to the float tower.
func TestQuantizedTower(t *testing.T) {
	m := visionModel(t)
	img := testImage(40, 30, 1)
	want, err := m.EncodeImages(context.Background(), []vision.Image{img})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "q")
	if err := os.CopyFS(dir, os.DirFS(m.Dir)); err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenDir(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var ts []safetensors.Tensor
	const bits, group = 8, 32
	for _, name := range ck.Names() {
		tt, _ := ck.Tensor(name)
		if !strings.HasPrefix(name, "vision_tower.") && !strings.HasPrefix(name, "multi_modal_projector.") {
			continue // in model.safetensors
		}
		quantize := strings.HasPrefix(name, "vision_tower.") && len(tt.Shape) == 2 && tt.Shape[1]%group == 0
		if !quantize {
			ts = append(ts, safetensors.Tensor{TensorInfo: tt.TensorInfo, Data: tt.Data})
			continue
		}
		v, _ := tt.Float32s()
		rows, cols := tt.Shape[0], tt.Shape[1]
		words, groups := quant.Words(cols, bits), cols/group
		packed, scales, biases := make([]uint32, rows*words), make([]float32, rows*groups), make([]float32, rows*groups)
		for r := range rows {
			quant.QuantizeRow(packed[r*words:(r+1)*words], scales[r*groups:(r+1)*groups], biases[r*groups:(r+1)*groups], v[r*cols:(r+1)*cols], bits, group)
		}
		base := strings.TrimSuffix(name, ".weight")
		u := make([]byte, 4*len(packed))
		for i, w := range packed {
			binary.LittleEndian.PutUint32(u[4*i:], w)
		}
		f := func(x []float32) []byte {
			b := make([]byte, 4*len(x))
			for i, y := range x {
				binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(y))
			}
			return b
		}
		ts = append(ts,
			safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: safetensors.U32, Shape: []int{rows, words}}, Data: u},
			safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: base + ".scales", DType: safetensors.F32, Shape: []int{rows, groups}}, Data: f(scales)},
			safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: base + ".biases", DType: safetensors.F32, Shape: []int{rows, groups}}, Data: f(biases)})
	}
	if err := safetensors.Write(filepath.Join(dir, "vision.safetensors"), ts, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["quantization"] = map[string]any{"group_size": group, "bits": bits}
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	q, err := model.Load(dir, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if q.Vision() == nil {
		t.Fatal("the quantized tower was not loaded")
	}
	got, err := q.EncodeImages(context.Background(), []vision.Image{img})
	if err != nil {
		t.Fatal(err)
	}
	if r := modeltest.MaxRel(got[0].Rows, want[0].Rows); r > 2e-2 || r == 0 {
		t.Errorf("8-bit tower's features are %.3g from the float tower's", r)
	}
}

// TestVisionMemory: the memory plan's tower figures (model.VisionMemoryOf) are the tower's tensor
// bytes (vision_tower.*), the patches of an image_size² image and its mm_tokens_per_image features
// times the feature cache's images; the estimate of the CPU backend's buffers while encoding an image
// bounds what the backend counts it held at once (ActivationPeak) without being more than 1.2 times it
// (the products' tiles are counted for every thread), for the tiny tower and a wider one; several images encode in passes of one, so their peak is one
// image's.
func TestVisionMemory(t *testing.T) {
	tiny := smallVision()
	tiny.ImageSize, tiny.Patch, tiny.Tokens = 224, 14, 64
	wide := tiny // rows, not the attention scores, are most of its activations
	wide.Hidden, wide.Intermediate, wide.Heads, wide.Layers = 128, 512, 4, 3
	for _, v := range []randmodel.Gemma3Vision{tiny, wide} {
		m := visionModelWith(t, v, 2)
		vm, err := model.VisionMemoryOf(m.Dir)
		if err != nil {
			t.Fatal(err)
		}
		weights := modeltest.TowerBytes(t, m.Dir, "vision_tower.") // beside the projector
		patches := (v.ImageSize / v.Patch) * (v.ImageSize / v.Patch)
		features := int64(4 * v.Tokens * m.Config.HiddenSize)
		if vm.Weights != weights || vm.MaxPatches != patches || vm.Features != min(model.FeatureCacheBytes, model.FeatureCacheImages*features) || vm.Encode <= 0 {
			t.Fatalf("%+v; want weights %d, %d patches, features %d", vm, weights, patches, model.FeatureCacheImages*features)
		}
		vc := gemma3.VisionConfig{Hidden: v.Hidden, Intermediate: v.Intermediate, Layers: v.Layers, Heads: v.Heads, Channels: v.Channels,
			ImageSize: v.ImageSize, Patch: v.Patch, Eps: v.Eps, Act: v.Act}
		buffers := gemma3.EncodeBuffers(vc, patches, v.Tokens, m.Config.HiddenSize)
		if buffers >= vm.Encode {
			t.Fatalf("the backend's part %d of an estimate of %d", buffers, vm.Encode)
		}
		measure := func(images ...vision.Image) int64 {
			peak, _ := modeltest.EncodePeak(t, m, images...)
			return peak
		}
		one := measure(testImage(300, 200, 4))
		t.Logf("%d×%d tower, one image (%d patches): the backend held at most %d bytes, estimated %d (%.2f×); %d with the host's",
			v.Layers, v.Hidden, patches, one, buffers, float64(buffers)/float64(one), vm.Encode)
		if buffers < one || buffers > one+one/5 {
			t.Errorf("estimate %d bytes for a peak of %d", buffers, one)
		}
		if three := measure(testImage(300, 200, 5), testImage(300, 200, 6), testImage(300, 200, 7)); three > one+one/10 {
			t.Errorf("three images: a peak of %d bytes, one's %d: not encoded in passes of one", three, one)
		}
	}
}
