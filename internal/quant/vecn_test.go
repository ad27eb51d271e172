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
	"time"
)

// TestVecN checks that VecN gives every vector, for every row, the bits Vec gives that
// vector and row alone: for each bit width, group size and scale type, 1 to VecsN vectors,
// rows of whole and odd numbers of kernel chunks (and sizes no kernel takes), with and
// without the assembly kernels (amd64 has the several-vector ones; elsewhere each vector
// runs through Vec's kernel), on random weights and inputs.
func TestVecN(t *testing.T) {
	for _, on := range []bool{true, false} {
		prev := SetSIMD(on)
		testVecN(t, on)
		SetSIMD(prev)
	}
}

func testVecN(t *testing.T, on bool) {
	r := rand.New(rand.NewPCG(29, 4))
	for _, st := range []ScaleType{ScaleF32, ScaleBF16, ScaleF16} {
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, group := range []int{32, 64, 128} {
				for _, cols := range []int{group, 448, 640, 1152, 96 * 7} {
					if cols%group != 0 {
						continue
					}
					const rows = 9
					w := randMatrix(r, rows*cols)
					p, s32, b32, err := Quantize(w, rows, cols, bits, group)
					if err != nil {
						t.Fatal(err)
					}
					s, b, _, _ := storedScales(st, s32, b32)
					wpr, gpr := Words(cols, bits), cols/group
					for n := 1; n <= VecsN; n++ {
						x := randMatrix(r, n*cols)
						var m VecN
						if err := m.Prepare(x, n, bits, group); err != nil {
							t.Fatal(err)
						}
						if want := on && runtime.GOARCH == "amd64" && n > 1 && n <= VecsFor(cols, bits) && (bits == 4 && cols%64 == 0 || bits == 8 && cols%32 == 0); m.multi != want {
							t.Fatalf("bits %d cols %d, %d vectors: multi-vector kernel %v, want %v", bits, cols, n, m.multi, want)
						}
						stride := rows + 3
						got := make([]float32, n*stride)
						m.DotRowsStored(got, stride, p, s, b)
						one := make([]float32, 1)
						for k := range n {
							var v Vec
							if err := v.Prepare(x[k*cols:(k+1)*cols], bits, group); err != nil {
								t.Fatal(err)
							}
							for row := range rows {
								v.DotRowsStored(one, p[row*wpr:(row+1)*wpr], s.Slice(row*gpr, (row+1)*gpr), b.Slice(row*gpr, (row+1)*gpr))
								if g := got[k*stride+row]; math.Float32bits(g) != math.Float32bits(one[0]) {
									t.Fatalf("simd %v (multi %v), %v scales, bits %d group %d cols %d, %d vectors: vector %d row %d = %v, alone %v",
										on, m.multi, st, bits, group, cols, n, k, row, g, one[0])
								}
							}
						}
						// One row at a time, as a chunk boundary may fall anywhere.
						m.DotRowsStored(got, stride, p[2*wpr:3*wpr], s.Slice(2*gpr, 3*gpr), b.Slice(2*gpr, 3*gpr))
						var v Vec
						_ = v.Prepare(x[(n-1)*cols:], bits, group)
						v.DotRowsStored(one, p[2*wpr:3*wpr], s.Slice(2*gpr, 3*gpr), b.Slice(2*gpr, 3*gpr))
						if g := got[(n-1)*stride]; math.Float32bits(g) != math.Float32bits(one[0]) {
							t.Fatalf("%v scales, bits %d group %d cols %d, %d vectors: one row %v, alone %v", st, bits, group, cols, n, g, one[0])
						}
					}
				}
			}
		}
	}
}

// TestDotQNGenerated checks that dotqn_amd64.s and dotqn_kernels_amd64.go are what
// dotqn_gen.go writes.
func TestDotQNGenerated(t *testing.T) {
	if testing.Short() || runtime.GOARCH != "amd64" {
		t.Skip("runs go run; the files are amd64's")
	}
	dir := t.TempDir()
	src, err := os.ReadFile("dotqn_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dotqn_gen.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "dotqn_gen.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run dotqn_gen.go: %v\n%s", err, out)
	}
	for _, f := range []string{"dotqn_amd64.s", "dotqn_kernels_amd64.go"} {
		want, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if string(have) != string(want) {
			t.Errorf("%s is not what dotqn_gen.go writes: run go generate in internal/quant", f)
		}
	}
}

// BenchmarkVecNPass times the products of a verification pass (or a batch's decode rows)
// of P rows with a qwen3-tiny-shaped 4-bit matrix (bf16 scales, group 64), one thread, as
// runner/cpu's affineMatVecs runs them: each chunk of 64 rows multiplied with every token,
// one Vec per token ("pertoken", each decoding the codes again) against VecN sets of up to
// VecsFor tokens ("sets", as even as can be), the two alternated and timed each round. It
// reports the median time per token of each, over the time of a one-row product
// (ratio/1row: 1 is as dear per token as a one-row pass):
//
//	go test -run '^$' -bench VecNPass -benchtime 200x ./internal/quant/
func BenchmarkVecNPass(b *testing.B) {
	const cols, group = 256, 64
	for _, shape := range []struct {
		name string
		rows int
	}{{"mlp768x256", 768}, {"head151936x256", 151936}} {
		r := rand.New(rand.NewPCG(3, 3))
		rows := shape.rows
		p, s, bi, _ := Quantize(randMatrix(r, rows*cols), rows, cols, 4, group)
		ss, bs, _, _ := storedScales(ScaleBF16, s, bi)
		wpr, gpr := Words(cols, 4), cols/group
		x := randMatrix(r, 9*cols)
		out := make([]float32, 9*rows)
		perToken := func(P int) {
			var vecs [9]Vec
			for t := range P {
				vecs[t].Prepare(x[t*cols:(t+1)*cols], 4, group)
			}
			for c0 := 0; c0 < rows; c0 += 64 {
				c1 := min(c0+64, rows)
				for t := range P {
					vecs[t].DotRowsStored(out[t*rows+c0:t*rows+c1], p[c0*wpr:c1*wpr], ss.Slice(c0*gpr, c1*gpr), bs.Slice(c0*gpr, c1*gpr))
				}
			}
		}
		var sets [3]VecN
		inSets := func(P int) {
			per := VecsFor(cols, 4)
			n := (P + per - 1) / per
			for k := range n {
				t0, t1 := k*P/n, (k+1)*P/n
				sets[k].Prepare(x[t0*cols:t1*cols], t1-t0, 4, group)
			}
			for c0 := 0; c0 < rows; c0 += 64 {
				c1 := min(c0+64, rows)
				for k := range n {
					sets[k].DotRowsStored(out[k*P/n*rows+c0:], rows, p[c0*wpr:c1*wpr], ss.Slice(c0*gpr, c1*gpr), bs.Slice(c0*gpr, c1*gpr))
				}
			}
		}
		passes := []int{1, 2, 4, 6, 8, 9}
		b.Run(shape.name, func(b *testing.B) {
			times := map[string][]float64{}
			for b.Loop() {
				for _, P := range passes {
					for _, side := range []struct {
						name string
						f    func(int)
					}{{"pertoken", perToken}, {"sets", inSets}} {
						t0 := time.Now()
						side.f(P)
						times[fmt.Sprintf("%s%d", side.name, P)] = append(times[fmt.Sprintf("%s%d", side.name, P)], float64(time.Since(t0).Nanoseconds())/float64(P))
					}
				}
			}
			one := median(times["pertoken1"])
			for _, P := range passes {
				for _, side := range []string{"pertoken", "sets"} {
					m := median(times[fmt.Sprintf("%s%d", side, P)])
					b.ReportMetric(m/1e3, fmt.Sprintf("us/token-%s%d", side, P))
					b.ReportMetric(m/one, fmt.Sprintf("ratio/1row-%s%d", side, P))
				}
			}
		})
	}
}
