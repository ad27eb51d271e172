package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// TestVec8 checks Vec8's products, with the AVX2 kernel where the CPU has it and in plain Go,
// on random weights and inputs: against the float64 product of the 8-bit inputs with the
// integer codes (act8Reference, exact up to float32 rounding), against the float product of
// the unrounded inputs within the bound rounding x to 8 bits allows (Σ |w|·d/2), and a row
// alone against the same row inside a larger call (bit-identical). Row lengths cover whole
// blocks of 8 groups and the groups left over after them.
func TestVec8(t *testing.T) {
	for _, on := range []bool{true, false} {
		prev := SetSIMD(on)
		name := "go"
		if int8Kernel() {
			name = "asm"
		}
		t.Run(name, testVec8)
		SetSIMD(prev)
	}
}

func testVec8(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	for _, st := range []ScaleType{ScaleF32, ScaleBF16, ScaleF16} {
		for _, group := range []int{64, 128} {
			for _, cols := range []int{128, 384, 448, 896, 1152, 2048, 4864} {
				if cols%group != 0 {
					continue
				}
				for _, rows := range []int{1, 3, 13} {
					checkVec8(t, r, st, 4, group, rows, cols)
				}
			}
		}
	}
}

func checkVec8(t *testing.T, r *rand.Rand, st ScaleType, bits, group, rows, cols int) {
	t.Helper()
	w := randMatrix(r, rows*cols)
	x := randMatrix(r, cols)
	for i := range x {
		x[i] += 0.01 // a nonzero mean, so the bias term matters
		if i%97 == 5 {
			x[i] *= 20 // an outlier channel, as activations have
		}
	}
	p, s32, b32, _ := Quantize(w, rows, cols, bits, group)
	s, b, sv, bv := storedScales(st, s32, b32)
	deq, _ := Dequantize(p, sv, bv, rows, cols, bits, group)
	var v Vec8
	if err := v.Prepare(x, bits, group); err != nil {
		t.Fatal(err)
	}
	c, d := v.natural(0)
	for j, f := range x {
		if e := math.Abs(float64(f) - float64(d[j/group])*float64(c[j])); e > float64(d[j/group])*0.5001 {
			t.Fatalf("x[%d] = %v quantized to %d·%v", j, f, c[j], d[j/group])
		}
	}
	got := make([]float32, rows)
	v.DotRowsStored(got, 0, p, s, b)
	what := func() string { return fmt.Sprintf("%v scales, %d bits, group %d, %d×%d", st, bits, group, rows, cols) }
	wpr, gpr := Words(cols, bits), cols/group
	for i := 0; i < rows; i++ {
		row := p[i*wpr : (i+1)*wpr]
		want, mag := act8Reference(c, d, row, s.Slice(i*gpr, (i+1)*gpr), b.Slice(i*gpr, (i+1)*gpr), bits, group)
		if math.Abs(float64(got[i])-want) > 2e-6*mag+1e-7 {
			t.Fatalf("%s: row %d = %v, integer reference %v (Σ|terms| %v)", what(), i, got[i], want, mag)
		}
		var exact, bound float64
		for j := 0; j < cols; j++ {
			wj := float64(deq[i*cols+j])
			exact += float64(x[j]) * wj
			bound += math.Abs(wj) * float64(d[j/group]) * 0.5
		}
		if math.Abs(float64(got[i])-exact) > bound+1e-5*mag {
			t.Fatalf("%s: row %d = %v, float product %v: off by more than 8-bit inputs allow (%v)", what(), i, got[i], exact, bound)
		}
		var one [1]float32
		v.DotRowsStored(one[:], 0, row, s.Slice(i*gpr, (i+1)*gpr), b.Slice(i*gpr, (i+1)*gpr))
		if math.Float32bits(one[0]) != math.Float32bits(got[i]) {
			t.Fatalf("%s: row %d alone = %v, in the call over %d rows %v", what(), i, one[0], rows, got[i])
		}
	}
}

// natural returns vector k's codes in the order of x and each group's d.
func (v *Vec8) natural(k int) ([]int8, []float32) {
	groups := v.n / v.group
	c := make([]int8, v.n)
	d := make([]float32, groups)
	for g := 0; g < groups; g++ {
		for j := 0; j < v.group; j++ {
			c[g*v.group+j] = v.code(k, g, j)
		}
		d[g] = v.dc[v.dcIndex(k, g)]
	}
	return c, d
}

// TestVec8Errors checks that unsupported shapes are refused with an error.
func TestVec8Errors(t *testing.T) {
	var v Vec8
	for _, c := range []struct{ n, count, bits, group int }{{64, 1, 4, 32}, {64, 1, 3, 64}, {96, 1, 4, 64}, {0, 1, 4, 64},
		{320, 5, 4, 64}, {128, 1, 8, 64}, {192, 2, 4, 64}, {128, 0, 4, 64}} {
		if err := v.PrepareN(make([]float32, c.n), c.count, c.bits, c.group); err == nil {
			t.Errorf("PrepareN(%d values, %d vectors, %d bits, group %d) succeeded", c.n, c.count, c.bits, c.group)
		}
	}
}

// TestVec8Round checks that PrepareN's assembly rounding gives the codes and factors of its
// plain Go form bit for bit: random inputs with outlier channels, values that fall exactly
// halfway between two codes (rounded to even), a group of zeros and a group whose largest
// value is negative, for 1 to 4 vectors and both group sizes.
func TestVec8Round(t *testing.T) {
	defer SetSIMD(SetSIMD(true))
	if !int8Kernel() {
		t.Skip("no AVX2 kernel on this CPU")
	}
	r := rand.New(rand.NewPCG(3, 14))
	for _, group := range []int{64, 128} {
		for _, cols := range []int{128, 384, 1152} {
			if cols%group != 0 {
				continue
			}
			for count := 1; count <= Int8Vectors; count++ {
				x := randMatrix(r, count*cols)
				for i := range x {
					switch {
					case i%97 == 5:
						x[i] *= 30
					case i%13 == 1:
						// halfway: with max|x| = 127 in the group these are k + 0.5
						x[i] = float32(r.IntN(254)-127) + 0.5
					}
				}
				for k := 0; k < count; k++ {
					x[k*cols+group-1] = 127 // makes d = 1 in the first group: the halves stay halves
				}
				clear(x[cols-group : cols])   // a group of zeros
				x[count*cols-group/2] = -1000 // a largest value that is negative
				var codes [2][]int8
				var dc [2][]float32
				for i, on := range []bool{true, false} {
					SetSIMD(on)
					var v Vec8
					if err := v.PrepareN(x, count, 4, group); err != nil {
						t.Fatal(err)
					}
					codes[i], dc[i] = v.codes, v.dc
				}
				SetSIMD(true)
				for i := range codes[0] {
					if codes[0][i] != codes[1][i] {
						t.Fatalf("group %d, %d columns, %d vectors: code %d is %d in assembly, %d in Go", group, cols, count, i, codes[0][i], codes[1][i])
					}
				}
				for i := range dc[0] {
					if math.Float32bits(dc[0][i]) != math.Float32bits(dc[1][i]) {
						t.Fatalf("group %d, %d columns, %d vectors: factor %d is %v in assembly, %v in Go", group, cols, count, i, dc[0][i], dc[1][i])
					}
				}
			}
		}
	}
}

// TestVec8Batch checks that Vec8 with 2 to 4 vectors gives each vector's results bit for
// bit as that vector alone does, with the kernel and in plain Go, and that the kernel agrees
// with plain Go to float32 rounding.
func TestVec8Batch(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, st := range []ScaleType{ScaleF32, ScaleBF16, ScaleF16} {
		for _, group := range []int{64, 128} {
			for _, cols := range []int{128, 896, 1152} {
				if cols%group != 0 {
					continue
				}
				const rows = 11
				p, s32, b32, _ := Quantize(randMatrix(r, rows*cols), rows, cols, 4, group)
				s, b, _, _ := storedScales(st, s32, b32)
				for count := 2; count <= Int8Vectors; count++ {
					x := randMatrix(r, count*cols)
					results := map[bool][]float32{}
					for _, on := range []bool{true, false} {
						prev := SetSIMD(on)
						var all Vec8
						if err := all.PrepareN(x, count, 4, group); err != nil {
							t.Fatal(err)
						}
						got := make([]float32, (rows+3)*count)
						all.DotRowsStored(got, rows+3, p, s, b) // results rows+3 apart: the gaps stay untouched
						for k := 0; k < count; k++ {
							var one Vec8
							one.Prepare(x[k*cols:(k+1)*cols], 4, group)
							alone := make([]float32, rows)
							one.DotRowsStored(alone, 0, p, s, b)
							for i := range alone {
								if math.Float32bits(alone[i]) != math.Float32bits(got[k*(rows+3)+i]) {
									t.Fatalf("%v scales, group %d, %d columns, kernel %v: vector %d of %d, row %d: %v in the batch, %v alone",
										st, group, cols, on, k, count, i, got[k*(rows+3)+i], alone[i])
								}
							}
							for i := rows; i < rows+3; i++ {
								if got[k*(rows+3)+i] != 0 {
									t.Fatalf("kernel %v: vector %d of %d wrote %v between its results and the next vector's", on, k, count, got[k*(rows+3)+i])
								}
							}
						}
						results[on] = got
						SetSIMD(prev)
					}
					if !int8Kernel() {
						continue
					}
					for i, g := range results[true] {
						want := float64(results[false][i])
						if math.Abs(float64(g)-want) > 1e-4*(1+math.Abs(want)) {
							t.Fatalf("%v scales, group %d, %d vectors: result %d is %v in assembly, %v in Go", st, group, count, i, g, want)
						}
					}
				}
			}
		}
	}
}

// TestAct8Generated checks that act8_amd64.s is what act8_gen.go writes.
func TestAct8Generated(t *testing.T) {
	if testing.Short() || runtime.GOARCH != "amd64" {
		t.Skip("runs go run; the file is amd64's (and an arm64 binary under qemu runs outside the source tree)")
	}
	dir := t.TempDir()
	src, err := os.ReadFile("act8_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "act8_gen.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "act8_gen.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run act8_gen.go: %v\n%s", err, out)
	}
	want, err := os.ReadFile(filepath.Join(dir, "act8_amd64.s"))
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("act8_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	if string(have) != string(want) {
		t.Errorf("act8_amd64.s is not what act8_gen.go writes: run go generate in internal/quant")
	}
}

// act8Reference is Vec8's product in float64 (tests): Σ_g d_g·(s_g·Σ c·q + b_g·Σ c) from the
// codes in natural order c and the groups' scales d, and Σ of the terms' magnitudes.
func act8Reference(c []int8, d []float32, packed []uint32, scales, biases Scales, bits, group int) (sum, mag float64) {
	for g := range d {
		var iq, ic int
		var aq float64
		for j := g * group; j < (g+1)*group; j++ {
			q := int(Code(packed, j, bits))
			iq += q * int(c[j])
			ic += int(c[j])
			aq += math.Abs(float64(q * int(c[j])))
		}
		s, b := float64(scales.At(g)), float64(biases.At(g))
		sum += float64(d[g]) * (s*float64(iq) + b*float64(ic))
		mag += float64(d[g]) * (math.Abs(s)*aq + math.Abs(b)*math.Abs(float64(ic)))
	}
	return sum, mag
}

// BenchmarkVec8Prepare times rounding 4 vectors of 4864 values (the 0.5B shape's widest
// input) to 8 bits, in assembly and in plain Go:
//
//	go test -run '^$' -bench Vec8Prepare ./internal/quant/
func BenchmarkVec8Prepare(b *testing.B) {
	x := randMatrix(rand.New(rand.NewPCG(1, 2)), 4*4864)
	for _, on := range []bool{true, false} {
		prev := SetSIMD(on)
		name := "go"
		if int8Kernel() {
			name = "asm"
		}
		b.Run(name, func(b *testing.B) {
			var v Vec8
			for b.Loop() {
				v.PrepareN(x, 4, 4, 64)
			}
			b.ReportMetric(float64(len(x)*b.N)/b.Elapsed().Seconds()/1e9, "Gvalues/s")
		})
		SetSIMD(prev)
	}
}
