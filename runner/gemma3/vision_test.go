package gemma3_test

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
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
func visionModel(t testing.TB) *model.Model {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "gemma3v")
	if err := randmodel.Generate(dir, randmodel.TinyGemma3(256), randmodel.Options{Seed: 6}); err != nil {
		t.Fatal(err)
	}
	if err := randmodel.AddGemma3Vision(dir, smallVision(), 9, false); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if m.Vision() == nil || !model.HasVision(dir) {
		t.Fatal("the checkpoint's tower was not loaded")
	}
	return m
}

// testImage is a w×h image whose pixels depend on seed.
func testImage(w, h int, seed uint8) vision.Image {
	m := vision.NewRGB(w, h)
	for i := range m.Pix {
		m.Pix[i] = uint8(i*7+int(seed)*31) ^ seed
	}
	return vision.NewImage(m)
}

// towerRef is transformers' Gemma 3 image features in float64 from the checkpoint's
// tensors: patches row-major through the SigLIP tower, AvgPool2d, Gemma's RMSNorm and
// the projection (Gemma3MultiModalProjector).
func towerRef(t *testing.T, dir string, v randmodel.Gemma3Vision, px []float32, text int) []float64 {
	t.Helper()
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	get := func(name string) []float64 {
		tt, ok := ck.Tensor(name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		f, err := tt.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float64, len(f))
		for i, x := range f {
			out[i] = float64(x)
		}
		return out
	}
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
