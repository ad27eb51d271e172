//go:build ignore

// dotqn_gen writes dotqn_amd64.s and dotqn_kernels_amd64.go: the multi-vector decode kernels
// of VecN, one function per bit width, scale type, group layout and number of vectors (go
// generate in this directory; TestDotQNGenerated checks that the files are up to date).
// Generated because every variant must run, per vector, the float32 operations of the
// one-vector kernel of dotq_amd64.s in its order.
package main

import (
	"bytes"
	"fmt"
	"os"
)

var out bytes.Buffer

// The most vectors of the AVX2 kernels (their accumulators take 2 registers a vector, the
// masks what is left) and of the AVX-512 ones (4 a vector, beside the scales and masks).
const maxAVX2, maxAVX512 = 6, 4

func emit(format string, args ...any) { fmt.Fprintf(&out, "\t"+format+"\n", args...) }
func label(name string)               { fmt.Fprintf(&out, "%s:\n", name) }

// A scale type's instructions, as dotq_amd64.s's macros of the same names.
type scaleType struct {
	name               string
	scaleA, scaleB     string // 4-bit, groups of 64 or more
	scaleA32, scaleB32 string // 4-bit, groups of 32
	scale8             func(idx, y, x string) string
	bias8, bias1       string
	bstep8, bstep1     int
	// AVX-512 (dotq512_amd64.s): a chunk's scales, masked by K1, into X (then spread);
	// a run of 16 biases into Z3, and the masked (K2) rest.
	zscale          func(x string) string
	zbias16, zbiasR string
	zbstep          int
}

var scaleTypes = []scaleType{
	{
		name:     "F32",
		scaleA:   "VBROADCASTSS (R10), Y0",
		scaleB:   "VBROADCASTSS (R10)(AX*1), Y1",
		scaleA32: "VBROADCASTSS (R10), X0; VBROADCASTSS 4(R10), X2; VINSERTF128 $1, X2, Y0, Y0",
		scaleB32: "VBROADCASTSS 8(R10), X1; VBROADCASTSS 12(R10), X2; VINSERTF128 $1, X2, Y1, Y1",
		scale8:   func(idx, y, x string) string { return fmt.Sprintf("VBROADCASTSS (R13)(%s*4), %s", idx, y) },
		bias8:    "VMOVUPS (R10), Y3",
		bias1:    "VMOVSS (R10), X3",
		bstep8:   32, bstep1: 4,
		zscale:  func(x string) string { return fmt.Sprintf("VMOVUPS.Z (R13)(DX*4), K1, %s", x) },
		zbias16: "VMOVUPS (R10), Z3",
		zbiasR:  "VMOVUPS.Z (R10), K2, Z3",
		zbstep:  64,
	},
	{
		name:     "BF16",
		scaleA:   "VPBROADCASTW (R10), Y0; VPSLLD $16, Y0, Y0",
		scaleB:   "VPBROADCASTW (R10)(AX*1), Y1; VPSLLD $16, Y1, Y1",
		scaleA32: "VPBROADCASTW (R10), X0; VPBROADCASTW 2(R10), X2; VINSERTI128 $1, X2, Y0, Y0; VPSLLD $16, Y0, Y0",
		scaleB32: "VPBROADCASTW 4(R10), X1; VPBROADCASTW 6(R10), X2; VINSERTI128 $1, X2, Y1, Y1; VPSLLD $16, Y1, Y1",
		scale8: func(idx, y, x string) string {
			return fmt.Sprintf("VPBROADCASTW (R13)(%s*2), %s; VPSLLD $16, %s, %s", idx, y, y, y)
		},
		bias8:  "VPMOVZXWD (R10), Y3; VPSLLD $16, Y3, Y3",
		bias1:  "MOVWLZX (R10), BX; SHLL $16, BX; VMOVD BX, X3",
		bstep8: 16, bstep1: 2,
		zscale: func(x string) string {
			return fmt.Sprintf("VMOVDQU16.Z (R13)(DX*2), K1, %s; VPMOVZXWD %s, %s; VPSLLD $16, %s, %s", x, x, x, x, x)
		},
		zbias16: "VPMOVZXWD (R10), Z3; VPSLLD $16, Z3, Z3",
		zbiasR:  "VMOVDQU16.Z (R10), K2, Y3; VPMOVZXWD Y3, Z3; VPSLLD $16, Z3, Z3",
		zbstep:  32,
	},
	{
		name:     "F16",
		scaleA:   "VPBROADCASTW (R10), X0; VCVTPH2PS X0, Y0",
		scaleB:   "VPBROADCASTW (R10)(AX*1), X1; VCVTPH2PS X1, Y1",
		scaleA32: "VPBROADCASTW (R10), X0; VPBROADCASTW 2(R10), X2; VPUNPCKLQDQ X2, X0, X0; VCVTPH2PS X0, Y0",
		scaleB32: "VPBROADCASTW 4(R10), X1; VPBROADCASTW 6(R10), X2; VPUNPCKLQDQ X2, X1, X1; VCVTPH2PS X1, Y1",
		scale8: func(idx, y, x string) string {
			return fmt.Sprintf("VPBROADCASTW (R13)(%s*2), %s; VCVTPH2PS %s, %s", idx, x, x, y)
		},
		bias8:  "VCVTPH2PS (R10), Y3",
		bias1:  "MOVWLZX (R10), BX; VMOVD BX, X3; VCVTPH2PS X3, X3",
		bstep8: 16, bstep1: 2,
		zscale: func(x string) string {
			return fmt.Sprintf("VMOVDQU16.Z (R13)(DX*2), K1, %s; VCVTPH2PS %s, %s", x, x, x)
		},
		zbias16: "VCVTPH2PS (R10), Z3",
		zbiasR:  "VMOVDQU16.Z (R10), K2, Y3; VCVTPH2PS Y3, Z3",
		zbstep:  32,
	},
}

func main() {
	out.WriteString(header)
	out.WriteString(tables)
	var decls bytes.Buffer
	decls.WriteString(goHeader)
	for _, bits := range []int{4, 8} {
		for _, st := range scaleTypes {
			layouts := []string{""}
			if bits == 4 {
				layouts = []string{"", "G32"}
			}
			for _, g := range layouts {
				for n := 2; n <= maxAVX2; n++ {
					name := fmt.Sprintf("dotQ%dx%d%s%s", bits, n, st.name, g)
					kernel(name, bits, n, st, g == "G32")
					fmt.Fprintf(&decls, "\n//go:noescape\nfunc %s(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, boff, pstep, stride int)\n", name)
				}
			}
		}
	}
	for _, bits := range []int{4, 8} {
		for _, st := range scaleTypes {
			for n := 2; n <= maxAVX512; n++ {
				name := fmt.Sprintf("dotQ%dZx%d%s", bits, n, st.name)
				kernelZ(name, bits, n, st)
				fmt.Fprintf(&decls, "\n//go:noescape\nfunc %s(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int, idx *int32, nscales, stride int)\n", name)
			}
		}
	}
	decls.WriteString("\n// The AVX-512 kernels by bit width (0: 4, 1: 8), scale type and number of vectors (n-2).\n")
	decls.WriteString("var dotQZxKernels = [2][3][3]func(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int, idx *int32, nscales, stride int){\n")
	for _, bits := range []int{4, 8} {
		decls.WriteString("\t{\n")
		for _, st := range scaleTypes {
			fmt.Fprintf(&decls, "\t\t{dotQ%dZx2%s, dotQ%dZx3%s, dotQ%dZx4%s},\n", bits, st.name, bits, st.name, bits, st.name)
		}
		decls.WriteString("\t},\n")
	}
	decls.WriteString("}\n")
	decls.WriteString("\n// The AVX2 kernels by bit width (0: 4, 1: 8), scale type, layout (0: groups of 64 or more,\n// 1: groups of 32) and number of vectors (index n-2).\n")
	fmt.Fprintf(&decls, "var dotQxKernels = [2][3][2][%d]func(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, boff, pstep, stride int){\n", maxAVX2-1)
	for _, bits := range []int{4, 8} {
		decls.WriteString("\t{\n")
		for _, st := range scaleTypes {
			decls.WriteString("\t\t{\n")
			for _, g := range []string{"", "G32"} {
				if bits == 8 && g == "G32" {
					decls.WriteString("\t\t\t{},\n")
					continue
				}
				decls.WriteString("\t\t\t{")
				for n := 2; n <= maxAVX2; n++ {
					if n > 2 {
						decls.WriteString(", ")
					}
					fmt.Fprintf(&decls, "dotQ%dx%d%s%s", bits, n, st.name, g)
				}
				decls.WriteString("},\n")
			}
			decls.WriteString("\t\t},\n")
		}
		decls.WriteString("\t},\n")
	}
	decls.WriteString("}\n")
	for file, b := range map[string][]byte{"dotqn_amd64.s": out.Bytes(), "dotqn_kernels_amd64.go": decls.Bytes()} {
		if err := os.WriteFile(file, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

const goHeader = `// Code generated by dotqn_gen.go; DO NOT EDIT.

package quant

import "unsafe"

// The multi-vector decode kernels of dotqn_amd64.s (AVX2, 2 to 6 vectors; AVX-512, 2 to 4): for rows consecutive packed rows
// and n vectors, out[k·stride+r] = x_k · the dequantized row r (stride in bytes), the inputs
// x' and group sums laid out as VecN.Prepare lays them out. chunks, groups, srow, boff and
// pstep are dotq_amd64.s's (boff and pstep unused by the 8-bit ones, which take the log2 of
// the group size in boff).
`

const header = `// Code generated by dotqn_gen.go; DO NOT EDIT.

#include "textflag.h"

// Products of packed 4- and 8-bit rows with 2 to 6 prepared vectors at once (VecN), AVX2+FMA:
// each chunk of a row is loaded and its codes converted to float32 once (AND, convert, as in
// dotq_amd64.s), then multiplied with every vector's inputs. Per vector the float32
// operations are those of dotq_amd64.s's one-vector kernel, in its order:
//   per chunk c:  e = x'0·v0 (+ x'2·v2 + x'4·v4 + x'6·v6; 8-bit: v0, v2)
//                 o = x'1·v1 (+ x'3·v3 + x'5·v5 + x'7·v7; 8-bit: v1, v3)
//                 tot[c&1] = fma(e+o, scale vector of chunk c, tot[c&1])
//   bias term:    bv = Σ over runs of 8 groups of fma(biases, sums), bs = Σ over the rest
//                 of fma(bias, sum) in order
//   result:       hsum((tot0+tot1)+bv) + bs
// so a vector's result is bit-identical to its product alone. The chunks are taken one
// after the other (the vectors give the FMAs enough independent chains); tot0 and tot1 of
// each vector live on the stack, the accumulators e and o of vector k in Y(4+k) and Y(4+n+k),
// then as many masks as the registers left hold.
// Vector k's inputs of chunk c lie at (c·n+k)·chunk floats, its sums of run r at (r·n+k)·8.
//
// Registers: SI inputs, R11 inputs of this chunk pair, DI codes, R13 and R12 the row's
// scales and biases, R10 scales (then biases) cursor, AX boff, R9 pstep (8-bit: the chunk
// pair's first code), CX the log2 of the group size (8-bit), R8 out, R14 rows left, BX
// pairs left; Y3 the chunk, Y2 a converted code, Y0/Y1 scale vectors.

// The 4-bit masks 15<<4j (j = 0..6) and 8-bit masks 255<<8j (j = 0..2), one vector each.
`

var masks4 = []uint32{0xf, 0xf0, 0xf00, 0xf000, 0xf0000, 0xf00000, 0xf000000}
var masks8 = []uint32{0xff, 0xff00, 0xff0000}

func init() {
	var b bytes.Buffer
	for i, m := range masks4 {
		for l := 0; l < 8; l++ {
			fmt.Fprintf(&b, "DATA qnm4<>+%d(SB)/4, $0x%08x\n", 32*i+4*l, m)
		}
	}
	fmt.Fprintf(&b, "GLOBL qnm4<>(SB), RODATA|NOPTR, $%d\n\n", 32*len(masks4))
	for i, m := range masks8 {
		for l := 0; l < 8; l++ {
			fmt.Fprintf(&b, "DATA qnm8<>+%d(SB)/4, $0x%08x\n", 32*i+4*l, m)
		}
	}
	fmt.Fprintf(&b, "GLOBL qnm8<>(SB), RODATA|NOPTR, $%d\n", 32*len(masks8))
	tables = b.String()
}

var tables string

// maskRegs is how many of the masks (7 for 4 bits, 3 for 8) the kernel of n vectors keeps in
// registers, Y(4+2n) on, after its accumulators; the others are memory operands.
func maskRegs(bits, n int) int {
	m := 7
	if bits == 8 {
		m = 3
	}
	return max(0, min(m, 12-2*n))
}

// chunk emits one chunk's products: codes at off(DI), inputs at xb(R11) onwards, the
// result into tot slot p of every vector, with the scale vector scale yields in ys.
func chunk(bits, n, off, xb, p int, scale, ys string) {
	emit("VMOVDQU %d(DI), Y3", off)
	codes, xstep, table := 8, 256, "qnm4"
	if bits == 8 {
		codes, xstep, table = 4, 128, "qnm8"
	}
	for j := 0; j < codes; j++ {
		switch {
		case j == codes-1:
			emit("VPSRLD $%d, Y3, Y2", 32-bits)
		case j < maskRegs(bits, n):
			emit("VPAND Y%d, Y3, Y2", 4+2*n+j)
		default:
			emit("VPAND %s<>+%d(SB), Y3, Y2", table, 32*j)
		}
		emit("VCVTDQ2PS Y2, Y2")
		for k := 0; k < n; k++ {
			acc := 4 + k
			if j%2 == 1 {
				acc = 4 + n + k
			}
			op := "VFMADD231PS"
			if j < 2 {
				op = "VMULPS"
			}
			emit("%s %d(R11), Y2, Y%d", op, xb+k*xstep+32*j, acc)
		}
	}
	for _, s := range splitInstr(scale) {
		emit("%s", s)
	}
	for k := 0; k < n; k++ {
		emit("VADDPS Y%d, Y%d, Y%d", 4+n+k, 4+k, 4+k)
		emit("VFMADD213PS %d(SP), %s, Y%d", 32*(2*k+p), ys, 4+k)
		emit("VMOVUPS Y%d, %d(SP)", 4+k, 32*(2*k+p))
	}
}

func splitInstr(s string) []string {
	var r []string
	for _, f := range bytes.Split([]byte(s), []byte(";")) {
		r = append(r, string(bytes.TrimSpace(f)))
	}
	return r
}

func kernel(name string, bits, n int, st scaleType, g32 bool) {
	fmt.Fprintf(&out, "\n// func %s(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, boff, pstep, stride int)\n", name)
	fmt.Fprintf(&out, "TEXT ·%s(SB), NOSPLIT, $%d-104\n", name, 64*n)
	emit("MOVQ x+0(FP), SI")
	emit("MOVQ w+8(FP), DI")
	emit("MOVQ scales+16(FP), R13")
	emit("MOVQ biases+24(FP), R12")
	emit("MOVQ out+40(FP), R8")
	emit("MOVQ rows+48(FP), R14")
	table := "qnm4"
	if bits == 8 {
		table = "qnm8"
	}
	for j := 0; j < maskRegs(bits, n); j++ {
		emit("VMOVDQU %s<>+%d(SB), Y%d", table, 32*j, 4+2*n+j)
	}
	if bits == 4 {
		emit("MOVQ boff+80(FP), AX")
		emit("MOVQ pstep+88(FP), R9")
	}
	label("row")
	emit("MOVQ SI, R11")
	if bits == 4 {
		emit("MOVQ R13, R10")
	} else {
		emit("XORQ R9, R9")
		emit("MOVQ boff+80(FP), CX")
	}
	emit("VXORPS Y0, Y0, Y0")
	for s := 0; s < 2*n; s++ {
		emit("VMOVUPS Y0, %d(SP)", 32*s)
	}
	emit("MOVQ chunks+56(FP), BX")
	emit("SHRQ $1, BX")
	emit("JZ tail")
	label("pair")
	xchunk := 256 * n
	if bits == 8 {
		xchunk = 128 * n
		emit("PREFETCHT0 4096(DI)")
		emit("MOVQ R9, DX")
		emit("SHRQ CX, DX")
		chunk(bits, n, 0, 0, 0, st.scale8("DX", "Y0", "X0"), "Y0")
		emit("LEAQ 32(R9), AX")
		emit("SHRQ CX, AX")
		chunk(bits, n, 32, xchunk, 1, st.scale8("AX", "Y1", "X1"), "Y1")
		emit("ADDQ $64, R9")
	} else {
		emit("PREFETCHT0 2048(DI)")
		sa, sb := st.scaleA, st.scaleB
		if g32 {
			sa, sb = st.scaleA32, st.scaleB32
		}
		chunk(bits, n, 0, 0, 0, sa, "Y0")
		chunk(bits, n, 32, xchunk, 1, sb, "Y1")
		emit("ADDQ R9, R10")
	}
	emit("ADDQ $64, DI")
	emit("ADDQ $%d, R11", 2*xchunk)
	emit("DECQ BX")
	emit("JNZ pair")
	label("tail")
	emit("TESTQ $1, chunks+56(FP)")
	emit("JZ bias")
	if bits == 8 {
		emit("MOVQ R9, DX")
		emit("SHRQ CX, DX")
		chunk(bits, n, 0, 0, 0, st.scale8("DX", "Y0", "X0"), "Y0")
	} else {
		sa := st.scaleA
		if g32 {
			sa = st.scaleA32
		}
		chunk(bits, n, 0, 0, 0, sa, "Y0")
	}
	emit("ADDQ $32, DI")
	label("bias")
	emit("MOVQ R12, R10")
	emit("MOVQ sums+32(FP), DX")
	for k := 0; k < n; k++ {
		emit("VXORPS Y%d, Y%d, Y%d", 4+k, 4+k, 4+k)
	}
	emit("MOVQ groups+64(FP), CX")
	emit("SHRQ $3, CX")
	emit("JZ brem")
	label("bvec")
	for _, s := range splitInstr(st.bias8) {
		emit("%s", s)
	}
	for k := 0; k < n; k++ {
		emit("VFMADD231PS %d(DX), Y3, Y%d", 32*k, 4+k)
	}
	emit("ADDQ $%d, R10", st.bstep8)
	emit("ADDQ $%d, DX", 32*n)
	emit("DECQ CX")
	emit("JNZ bvec")
	label("brem")
	for k := 0; k < n; k++ {
		emit("VXORPS X%d, X%d, X%d", 4+n+k, 4+n+k, 4+n+k)
	}
	emit("MOVQ groups+64(FP), CX")
	emit("ANDQ $7, CX")
	emit("JZ hsum")
	label("bone")
	for _, s := range splitInstr(st.bias1) {
		emit("%s", s)
	}
	for k := 0; k < n; k++ {
		emit("VFMADD231SS %d(DX), X3, X%d", 32*k, 4+n+k)
	}
	emit("ADDQ $%d, R10", st.bstep1)
	emit("ADDQ $4, DX")
	emit("DECQ CX")
	emit("JNZ bone")
	label("hsum")
	emit("MOVQ stride+96(FP), CX")
	emit("MOVQ R8, DX")
	for k := 0; k < n; k++ {
		emit("VMOVUPS %d(SP), Y2", 64*k)
		emit("VADDPS %d(SP), Y2, Y2", 64*k+32)
		emit("VADDPS Y%d, Y2, Y2", 4+k)
		emit("VEXTRACTF128 $1, Y2, X0")
		emit("VADDPS X0, X2, X0")
		emit("VHADDPS X0, X0, X0")
		emit("VHADDPS X0, X0, X0")
		emit("VADDSS X%d, X0, X0", 4+n+k)
		emit("VMOVSS X0, (DX)")
		if k < n-1 {
			emit("ADDQ CX, DX")
		}
	}
	emit("ADDQ $4, R8")
	emit("ADDQ srow+72(FP), R13")
	emit("ADDQ srow+72(FP), R12")
	emit("DECQ R14")
	emit("JNZ row")
	emit("VZEROUPPER")
	emit("RET")
}

// zchunk is chunk for the AVX-512 kernels: codes at off(DI), inputs at xb(R11) onwards,
// the code index of the chunk's first code at R9+first, the result into tot[p] of every
// vector (Z24+k for p 0, Z28+k for p 1), with the scale vector spread into Zs.
func zchunk(bits, n, off, xb, first, p int, st scaleType, s int) {
	emit("VMOVDQU32 %d(DI), Z3", off)
	codes, xstep := 8, 512
	if bits == 8 {
		codes, xstep = 4, 256
	}
	for j := 0; j < codes; j++ {
		if j == codes-1 {
			emit("VPSRLD $%d, Z3, Z2", 32-bits)
		} else {
			emit("VPANDD Z%d, Z3, Z2", 8+j)
		}
		emit("VCVTDQ2PS Z2, Z2")
		for k := 0; k < n; k++ {
			acc := 4 + k
			if j%2 == 1 {
				acc = 20 + k
			}
			op := "VFMADD231PS"
			if j < 2 {
				op = "VMULPS"
			}
			emit("%s %d(R11), Z2, Z%d", op, xb+k*xstep+64*j, acc)
		}
	}
	if first == 0 {
		emit("MOVQ R9, DX")
	} else {
		emit("LEAQ %d(R9), AX", first)
		emit("MOVQ AX, DX")
	}
	emit("SHRQ CX, DX")
	for _, i := range splitInstr(st.zscale(fmt.Sprintf("X%d", s))) {
		emit("%s", i)
	}
	emit("VPERMPS Z%d, Z18, Z%d", s, s)
	for k := 0; k < n; k++ {
		emit("VADDPS Z%d, Z%d, Z%d", 20+k, 4+k, 4+k)
		emit("VFMADD231PS Z%d, Z%d, Z%d", s, 4+k, 24+4*p+k)
	}
}

// kernelZ writes the AVX-512 kernel of n vectors: dotq512_amd64.s's arithmetic per vector,
// its tot0 and tot1 in Z24+k and Z28+k, e and o in Z4+k and Z20+k.
func kernelZ(name string, bits, n int, st scaleType) {
	fmt.Fprintf(&out, "\n// func %s(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int, idx *int32, nscales, stride int)\n", name)
	fmt.Fprintf(&out, "TEXT ·%s(SB), NOSPLIT, $0-112\n", name)
	emit("MOVQ x+0(FP), SI")
	emit("MOVQ w+8(FP), DI")
	emit("MOVQ scales+16(FP), R13")
	emit("MOVQ biases+24(FP), R12")
	emit("MOVQ out+40(FP), R8")
	emit("MOVQ rows+48(FP), R14")
	emit("MOVQ idx+88(FP), AX")
	emit("VMOVDQU32 (AX), Z18")
	emit("MOVQ nscales+96(FP), CX")
	emit("MOVL $1, AX")
	emit("SHLL CX, AX")
	emit("DECL AX")
	emit("KMOVW AX, K1")
	masks := masks4
	if bits == 8 {
		masks = masks8
	}
	for j, m := range masks {
		emit("MOVL $0x%x, AX", m)
		emit("VPBROADCASTD AX, Z%d", 8+j)
	}
	label("row")
	emit("MOVQ SI, R11")
	emit("XORQ R9, R9")
	emit("MOVQ gshift+80(FP), CX")
	for k := 0; k < n; k++ {
		emit("VPXORD Z%d, Z%d, Z%d", 24+k, 24+k, 24+k)
		emit("VPXORD Z%d, Z%d, Z%d", 28+k, 28+k, 28+k)
	}
	emit("MOVQ chunks+56(FP), BX")
	emit("SHRQ $1, BX")
	emit("JZ tail")
	label("pair")
	// A chunk is 64 bytes: 128 4-bit codes (inputs 512 bytes a vector) or 64 8-bit ones (256).
	xchunk, codes, pf := 512*n, 128, 512
	if bits == 8 {
		xchunk, codes, pf = 256*n, 64, 1024
	}
	emit("PREFETCHT0 %d(DI)", pf)
	emit("PREFETCHT0 %d(DI)", pf+64)
	zchunk(bits, n, 0, 0, 0, 0, st, 0)
	zchunk(bits, n, 64, xchunk, codes, 1, st, 1)
	emit("ADDQ $128, DI")
	emit("ADDQ $%d, R11", 2*xchunk)
	emit("ADDQ $%d, R9", 2*codes)
	emit("DECQ BX")
	emit("JNZ pair")
	label("tail")
	emit("TESTQ $1, chunks+56(FP)")
	emit("JZ bias")
	zchunk(bits, n, 0, 0, 0, 0, st, 0)
	emit("ADDQ $64, DI")
	label("bias")
	emit("MOVQ R12, R10")
	emit("MOVQ sums+32(FP), DX")
	for k := 0; k < n; k++ {
		emit("VPXORD Z%d, Z%d, Z%d", 4+k, 4+k, 4+k)
	}
	emit("MOVQ groups+64(FP), CX")
	emit("SHRQ $4, CX")
	emit("JZ brem")
	label("bvec")
	for _, i := range splitInstr(st.zbias16) {
		emit("%s", i)
	}
	for k := 0; k < n; k++ {
		emit("VFMADD231PS %d(DX), Z3, Z%d", 64*k, 4+k)
	}
	emit("ADDQ $%d, R10", st.zbstep)
	emit("ADDQ $%d, DX", 64*n)
	emit("DECQ CX")
	emit("JNZ bvec")
	label("brem")
	emit("MOVQ groups+64(FP), CX")
	emit("ANDQ $15, CX")
	emit("JZ hsum")
	emit("MOVL $1, AX")
	emit("SHLL CX, AX")
	emit("DECL AX")
	emit("KMOVW AX, K2")
	for _, i := range splitInstr(st.zbiasR) {
		emit("%s", i)
	}
	// The rest's sums are zero-padded to a whole run, as the masked load makes them.
	for k := 0; k < n; k++ {
		emit("VFMADD231PS %d(DX), Z3, Z%d", 64*k, 4+k)
	}
	label("hsum")
	emit("MOVQ stride+104(FP), AX")
	emit("MOVQ R8, DX")
	for k := 0; k < n; k++ {
		emit("VADDPS Z%d, Z%d, Z16", 28+k, 24+k)
		emit("VADDPS Z%d, Z16, Z16", 4+k)
		emit("VEXTRACTF64X4 $1, Z16, Y0")
		emit("VADDPS Y0, Y16, Y0")
		emit("VEXTRACTF128 $1, Y0, X1")
		emit("VADDPS X1, X0, X0")
		emit("VHADDPS X0, X0, X0")
		emit("VHADDPS X0, X0, X0")
		emit("VMOVSS X0, (DX)")
		if k < n-1 {
			emit("ADDQ AX, DX")
		}
	}
	emit("ADDQ $4, R8")
	emit("ADDQ srow+72(FP), R13")
	emit("ADDQ srow+72(FP), R12")
	emit("DECQ R14")
	emit("JNZ row")
	emit("VZEROUPPER")
	emit("RET")
}
