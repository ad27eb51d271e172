// Shared by fused_amd64.s and fused_group_amd64.s.

// q4_0 stores one fp16 scale d per group of 32: its values are d·code - 8d, an affine
// group with bias -8d, made from d by multiplying (d, d) with q40sb. (A file-local
// symbol: each file that includes this header has its own copy.)
DATA q40sb<>+0(SB)/4, $0x3f800000 // 1.0
DATA q40sb<>+4(SB)/4, $0xc1000000 // -8.0
DATA q40sb<>+8(SB)/4, $0
DATA q40sb<>+12(SB)/4, $0
GLOBL q40sb<>(SB), RODATA|NOPTR, $16

// Q40SB loads q4_0's fp16 d at src (through the general register R) into X as its
// affine (scale, bias) = (d, -8d).
#define Q40SB(src, R, X) \
	MOVWLZX src, R; \
	VMOVD R, X; \
	VCVTPH2PS X, X; \
	VBROADCASTSS X, X; \
	VMULPS q40sb<>(SB), X, X

// EVENODD puts 16 elements held as their 8 even ones (E) and 8 odd ones (O) back in
// order, elements 0-7 in E and 8-15 in O: unpack within the 128-bit lanes, then swap
// the lane halves (T0 and T1 are scratch).
#define EVENODD(E, O, T0, T1) \
	VUNPCKLPS O, E, T0; \
	VUNPCKHPS O, E, T1; \
	VPERM2F128 $0x20, T1, T0, E; \
	VPERM2F128 $0x31, T1, T0, O
