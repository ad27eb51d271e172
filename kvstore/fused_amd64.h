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

// 6-bit codes: MLX packs them as one little-endian bit stream, 4 codes in 3 bytes, so
// a run of 8 codes is 6 bytes and code j of a run starts at bit 6j. UNPACK6 reads a run
// of 16 codes (12 bytes) as two 8-byte loads, at LO (its first 6 bytes) and at HI = LO+4
// (bytes 2-7 of which are the run's second 6): both stay inside the 12 bytes, so a
// row's last run never reads past it. A shuffle (c6lo, c6hi) puts the one or two bytes
// that hold code j into lane j, and an AND with c6mask keeps its 6 bits where they lie:
// lane j then holds code_j·2^s_j, s_j = 6j mod 8 (0, 6, 4, 2, 0, 6, 4, 2), exactly, as an
// int32. The key kernels take queries scaled by 2^-s_j (prepareQ), the value kernels
// scale their sums back by c6down before they are stored, so no lane is shifted.
DATA c6lo<>+0(SB)/4, $0x80808000  // lane 0: byte 0
DATA c6lo<>+4(SB)/4, $0x80800100  // lane 1: bytes 0, 1
DATA c6lo<>+8(SB)/4, $0x80800201  // lane 2: bytes 1, 2
DATA c6lo<>+12(SB)/4, $0x80808002 // lane 3: byte 2
DATA c6lo<>+16(SB)/4, $0x80808003 // lane 4: byte 3
DATA c6lo<>+20(SB)/4, $0x80800403
DATA c6lo<>+24(SB)/4, $0x80800504
DATA c6lo<>+28(SB)/4, $0x80808005
GLOBL c6lo<>(SB), RODATA|NOPTR, $32

// c6hi is c6lo for the load at LO+4: the run's bytes 6-11 are its bytes 2-7.
DATA c6hi<>+0(SB)/4, $0x80808002
DATA c6hi<>+4(SB)/4, $0x80800302
DATA c6hi<>+8(SB)/4, $0x80800403
DATA c6hi<>+12(SB)/4, $0x80808004
DATA c6hi<>+16(SB)/4, $0x80808005
DATA c6hi<>+20(SB)/4, $0x80800605
DATA c6hi<>+24(SB)/4, $0x80800706
DATA c6hi<>+28(SB)/4, $0x80808007
GLOBL c6hi<>(SB), RODATA|NOPTR, $32

DATA c6mask<>+0(SB)/4, $0x3f
DATA c6mask<>+4(SB)/4, $0xfc0
DATA c6mask<>+8(SB)/4, $0x3f0
DATA c6mask<>+12(SB)/4, $0xfc
DATA c6mask<>+16(SB)/4, $0x3f
DATA c6mask<>+20(SB)/4, $0xfc0
DATA c6mask<>+24(SB)/4, $0x3f0
DATA c6mask<>+28(SB)/4, $0xfc
GLOBL c6mask<>(SB), RODATA|NOPTR, $32

// c6down is 2^-s_j, lane by lane (1, 2^-6, 2^-4, 2^-2, ...).
DATA c6down<>+0(SB)/4, $0x3f800000
DATA c6down<>+4(SB)/4, $0x3c800000
DATA c6down<>+8(SB)/4, $0x3d800000
DATA c6down<>+12(SB)/4, $0x3e800000
DATA c6down<>+16(SB)/4, $0x3f800000
DATA c6down<>+20(SB)/4, $0x3c800000
DATA c6down<>+24(SB)/4, $0x3d800000
DATA c6down<>+28(SB)/4, $0x3e800000
GLOBL c6down<>(SB), RODATA|NOPTR, $32

// UNPACK6 sets A and B to a run of 16 6-bit codes (A: codes 0-7 from the 8 bytes at LO,
// B: codes 8-15 from those at HI = LO+4) as float32 code_j·2^s_j; CL, CH and M hold
// c6lo, c6hi and c6mask (registers: the loads ports are what a run of 16 codes is
// short of).
#define UNPACK6(LO, HI, A, B, CL, CH, M) \
	VPBROADCASTQ LO, A; \
	VPBROADCASTQ HI, B; \
	VPSHUFB CL, A, A; \
	VPSHUFB CH, B, B; \
	VPAND M, A, A; \
	VPAND M, B, B; \
	VCVTDQ2PS A, A; \
	VCVTDQ2PS B, B
