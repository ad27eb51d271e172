package metal_test

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/metal"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// TestTowerMemoryOnMLX: encoding an image holds about one tower block's activations at
// a time (Free's barriers, metal/vision.go), not every block's: a tower of 8 blocks
// raises MLX's peak memory little above one of 2 blocks, over a 256×256 image (4,096
// patches of a tower 128 wide). Without the barriers the peak grows with the depth.
func TestTowerMemoryOnMLX(t *testing.T) {
	lib := mlxtest.Lib(t)
	open := mlxtest.Opener(t)
	dir := t.TempDir()
	write := func(depth int) string {
		v := randmodel.QwenVision{Depth: depth, Hidden: 128, Act: "gelu_pytorch_tanh", Intermediate: 256, Heads: 4, InChannels: 3,
			Patch: 4, Merge: 2, Temporal: 2, NumPositions: 16, MinPixels: 16 * 64, MaxPixels: 1024 * 64}
		hf, out := filepath.Join(dir, "hf", string(rune('a'+depth))), filepath.Join(dir, "mlx", string(rune('a'+depth)))
		if err := randmodel.GenerateQwen35(hf, randmodel.TinyQwen3Next(256), &v, randmodel.Options{Seed: 4}); err != nil {
			t.Fatal(err)
		}
		if _, err := create.Convert(context.Background(), hf, out, create.Options{}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	img := vision.NewRGB(256, 256)
	for i := range img.Pix {
		img.Pix[i] = uint8(i*13 + i/7)
	}
	im := vision.NewImage(img)
	encode := func(dir string) (peak uint64) {
		b, err := open()
		if err != nil {
			t.Fatal(err)
		}
		m, err := model.Load(dir, b)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		spans, err := m.EncodeImages(context.Background(), []vision.Image{im})
		if err != nil {
			t.Fatal(err)
		}
		if spans[0].Grid != [3]int{1, 32, 32} {
			t.Fatalf("grid %v, want 32×32 tokens (4,096 patches)", spans[0].Grid)
		}
		mem, err := lib.Memory()
		if err != nil {
			t.Fatal(err)
		}
		b.(*metal.Backend).Close()
		return mem.Peak
	}
	shallow, deep := write(2), write(8)
	before, err := lib.Memory()
	if err != nil {
		t.Fatal(err)
	}
	p2 := encode(shallow)
	p8 := encode(deep) // the peak so far: at least p2
	g2, g8 := float64(p2-before.Active), float64(p8-before.Active)
	t.Logf("peak above the start: %.1f MiB with 2 blocks, %.1f MiB with 8", g2/(1<<20), g8/(1<<20))
	if g8 > 1.5*g2 {
		t.Errorf("8 blocks peak at %.1f MiB, 2 blocks at %.1f MiB: the tower's activations are held beyond their block", g8/(1<<20), g2/(1<<20))
	}
}

// TestSpanAttentionOnMLX: AttentionSpans on MLX gives the CPU backend's results over
// every cache kind, among them affine groups of 16, which MLX does not read (the spans
// go to kvstore's kernels) and a sliding window whose ring the widened rows reach back
// into: a prefill with an image, then a pass that ends an image begun before it. In the
// same passes a KV-shared layer's attention (AttentionShared, other queries, the same
// spans) over the cache AttentionSpans filled gives the CPU backend's results too.
func TestSpanAttentionOnMLX(t *testing.T) {
	open := mlxtest.Opener(t)
	const heads, kvHeads, dim, total = 4, 2, 64, 13
	r := rand.New(rand.NewPCG(5, 6))
	randn := func(n int) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(r.NormFloat64())
		}
		return out
	}
	q, k, v := randn(total*heads*dim), randn(total*kvHeads*dim), randn(total*kvHeads*dim)
	q2 := randn(total * heads * dim)
	steps := []int{8, 5}
	spans := [][]kvstore.Span{{{Start: 2, End: 6}, {Start: 7, End: 8}}, {{Start: 7, End: 11}}}
	for _, kc := range []struct {
		name   string
		spec   kvstore.Spec
		window int
	}{
		{"fp16", kvstore.SpecF16, 0},
		{"affine k8/v4 g16", kvstore.Spec{K: kvstore.AffineFormat(8, 16), V: kvstore.AffineFormat(4, 16)}, 0},
		{"affine k4/v4 g64", kvstore.Spec{K: kvstore.AffineFormat(4, 64), V: kvstore.AffineFormat(4, 64)}, 0},
		{"sliding window 3 fp16", kvstore.SpecF16, 3},
	} {
		run := func(b compute.Backend) (own, shared []float32) {
			var cache kvstore.Layer
			var err error
			switch {
			case kc.window > 0:
				cache, err = kvstore.NewRotating(kvHeads, dim, dim, kc.window, kc.spec, 0)
			case kc.spec == kvstore.SpecF16:
				cache, err = kvstore.NewFull(kvHeads, dim, dim, false)
			default:
				cache, err = kvstore.NewQuantized(kvHeads, dim, dim, kc.spec, 0)
			}
			if err != nil {
				t.Fatal(err)
			}
			pos := 0
			for i, n := range steps {
				c := b.NewContext()
				vc, _ := compute.Ext[compute.VisionContext](c)
				sc, ok := compute.Ext[compute.SpanAttentionContext](c)
				shc, ok2 := compute.Ext[compute.SharedKVContext](c)
				if !ok || !ok2 {
					t.Fatalf("%s has no span attention or no shared-KV attention", b.Name())
				}
				in := func(x []float32, w int) compute.Tensor { return vc.Input(x[pos*w:(pos+n)*w], n, w) }
				o := sc.AttentionSpans(in(q, heads*dim), in(k, kvHeads*dim), in(v, kvHeads*dim), cache, heads, 0.125, spans[i])
				s := shc.AttentionShared(in(q2, heads*dim), cache, heads, 0.125, spans[i])
				got, err := c.Float32s(o)
				var got2 []float32
				if err == nil {
					got2, err = c.Float32s(s)
				}
				c.Close()
				if err != nil {
					t.Fatalf("%s on %s: %v", kc.name, b.Name(), err)
				}
				own, shared = append(own, got...), append(shared, got2...)
				pos += n
			}
			return own, shared
		}
		b, err := open()
		if err != nil {
			t.Fatal(err)
		}
		got, gotShared := run(b)
		want, wantShared := run(cpu.New(2))
		for _, op := range []struct {
			name      string
			got, want []float32
		}{{"AttentionSpans", got, want}, {"AttentionShared", gotShared, wantShared}} {
			var worst, scale float64
			for i := range op.want {
				worst = max(worst, math.Abs(float64(op.got[i]-op.want[i])))
				scale = max(scale, math.Abs(float64(op.want[i])))
			}
			t.Logf("%-16s %-24s max error %.2e of %.2f", op.name, kc.name, worst, scale)
			if worst > 1e-4*scale || len(op.got) != len(op.want) {
				t.Errorf("%s: %s on MLX differs from the CPU backend by %.3g (of %.3g)", kc.name, op.name, worst, scale)
			}
		}
	}
}
