package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
)

// TestLinears: products of one input through Linears are Linear's, bit for bit: fused
// (a layer's q, k, v with biases, or gate and up; 1 to 3 rows; float and 8-bit inputs;
// scales in bf16, f16 and f32; 3 to 8 bits) and not (4 rows, mixed bits, float weights,
// segments). The first five cases fuse, the last two do not.
func TestLinears(t *testing.T) { bothKernels(t, testLinears) }

func testLinears(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const in = 256
	type layer struct {
		name       string
		out, bits  int
		group      int
		scale      safetensors.DType
		float, bia bool
	}
	cases := [][]layer{
		{{"q", 256, 4, 64, safetensors.BF16, false, true}, {"k", 64, 4, 64, safetensors.BF16, false, true}, {"v", 64, 4, 64, safetensors.BF16, false, true}},
		{{"gate", 1500, 4, 32, safetensors.F32, false, false}, {"up", 1500, 4, 32, safetensors.F32, false, false}},
		{{"a", 96, 8, 64, safetensors.F16, false, false}, {"b", 33, 8, 64, safetensors.F16, false, true}, {"c", 1, 8, 64, safetensors.F16, false, false}, {"d", 300, 8, 64, safetensors.F16, false, false}},
		{{"a", 96, 3, 64, safetensors.BF16, false, false}, {"b", 96, 3, 64, safetensors.BF16, false, false}},
		{{"a", 64, 6, 64, safetensors.BF16, false, false}, {"b", 128, 6, 64, safetensors.BF16, false, false}},
		{{"mixed4", 96, 4, 64, safetensors.BF16, false, false}, {"mixed8", 96, 8, 64, safetensors.BF16, false, false}},
		{{"float", 96, 0, 0, safetensors.F32, true, true}, {"q", 96, 4, 64, safetensors.BF16, false, false}},
	}
	for _, int8 := range []bool{false, true} {
		b := New(2)
		b.UseInt8(int8)
		for ci, ls := range cases {
			src := source{}
			ws := make([]compute.Weight, len(ls))
			for i, l := range ls {
				w := randVec(r, l.out*in)
				q := compute.Quant{}
				if l.float {
					src.putFloat(l.name+".weight", safetensors.F32, []int{l.out, in}, w)
				} else {
					packed, scales, biases, err := quant.Quantize(w, l.out, in, l.bits, l.group)
					if err != nil {
						t.Fatal(err)
					}
					src.putU32(l.name+".weight", []int{l.out, in * l.bits / 32}, packed)
					src.putFloat(l.name+".scales", l.scale, []int{l.out, in / l.group}, scales)
					src.putFloat(l.name+".biases", l.scale, []int{l.out, in / l.group}, biases)
					q = compute.Quant{Mode: quant.Affine, Bits: l.bits, GroupSize: l.group}
				}
				if l.bia {
					src.putFloat(l.name+".bias", safetensors.F32, []int{l.out}, randVec(r, l.out))
				}
				var err error
				if ws[i], err = b.Weight(src, l.name, q); err != nil {
					t.Fatal(err)
				}
			}
			for _, T := range []int{1, 2, 3, 4} {
				for _, segs := range [][]int{nil, {1, T - 1}} {
					if segs != nil && T == 1 {
						continue
					}
					x := randVec(r, T*in)
					xw := input(t, b, T, in, x)
					outs := func(fused bool) [][]float32 {
						c := b.NewContext()
						defer c.Close()
						if segs != nil {
							c.(compute.BatchContext).Segments(segs)
						}
						h := c.Embed(xw, seq(T))
						got := make([]compute.Tensor, len(ws))
						if fused {
							compute.Linears(c, h, ws, got)
						} else {
							for i, w := range ws {
								got[i] = c.Linear(h, w)
							}
						}
						var res [][]float32
						for _, g := range got {
							f, err := c.Float32s(g)
							if err != nil {
								t.Fatal(err)
							}
							res = append(res, f)
						}
						return res
					}
					fused, alone := outs(true), outs(false)
					c := b.NewContext()
					if segs != nil {
						c.(compute.BatchContext).Segments(segs)
					}
					a, _ := c.(*context).args(c.Embed(xw, seq(T)))
					var cw [maxLinears]*weight
					if want := ci < 5 && T < 4 && segs == nil; c.(*context).fusable(a[0], ws, &cw) != want {
						t.Fatalf("int8 %v, case %d, T=%d, segments %v: fusable is not %v", int8, ci, T, segs, want)
					}
					c.Close()
					for i := range ws {
						what := fmt.Sprintf("int8 %v, case %d, %s, T=%d, segments %v", int8, ci, ls[i].name, T, segs)
						if len(fused[i]) != T*ls[i].out {
							t.Fatalf("%s: %d values, want %d", what, len(fused[i]), T*ls[i].out)
						}
						for j := range fused[i] {
							if math.Float32bits(fused[i][j]) != math.Float32bits(alone[i][j]) {
								t.Fatalf("%s: value %d is %v through Linears, %v through Linear", what, j, fused[i][j], alone[i][j])
							}
						}
					}
				}
			}
		}
	}
}

// Linears reports Linear's errors.
func TestLinearsErrors(t *testing.T) {
	b := New(2)
	r := rand.New(rand.NewPCG(1, 1))
	src := source{}
	src.putFloat("a.weight", safetensors.F32, []int{8, 16}, randVec(r, 8*16))
	w, _ := b.Weight(src, "a", compute.Quant{})
	c := b.NewContext()
	defer c.Close()
	x := c.Embed(input(t, b, 1, 32, randVec(r, 32)), seq(1))
	out := make([]compute.Tensor, 2)
	compute.Linears(c, x, []compute.Weight{w, w}, out)
	if c.Err() == nil {
		t.Fatal("Linears of a 32-column input with a 16-column weight did not fail")
	}
}
