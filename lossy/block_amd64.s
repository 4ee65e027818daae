//go:build amd64 && !noasm && gc

// AVX2 kernels of the blockwise quantizers; see block_amd64.go and the
// reference loops absmaxBits (block.go), quantI8 and dequantI8 (int8.go),
// quantNF4, quantFP4 and dequant4 (fourbit.go).

#include "textflag.h"

DATA absmask<>+0(SB)/4, $0x7fffffff
GLOBL absmask<>(SB), RODATA|NOPTR, $4

// permd puts the dwords of a VPACKSS/US chain back in element order.
DATA permd<>+0(SB)/4, $0
DATA permd<>+4(SB)/4, $4
DATA permd<>+8(SB)/4, $1
DATA permd<>+12(SB)/4, $5
DATA permd<>+16(SB)/4, $2
DATA permd<>+20(SB)/4, $6
DATA permd<>+24(SB)/4, $3
DATA permd<>+28(SB)/4, $7
GLOBL permd<>(SB), RODATA|NOPTR, $32

DATA minus127<>+0(SB)/1, $0x81
GLOBL minus127<>(SB), RODATA|NOPTR, $1


DATA lownib<>+0(SB)/1, $0x0f
GLOBL lownib<>(SB), RODATA|NOPTR, $1

// nibmul: the byte pair (1, 16): VPMADDUBSW makes c0 + 16*c1 of a pair of
// codes.
DATA nibmul<>+0(SB)/2, $0x1001
GLOBL nibmul<>(SB), RODATA|NOPTR, $2

DATA f127<>+0(SB)/4, $0x42fe0000
GLOBL f127<>(SB), RODATA|NOPTR, $4

DATA f1<>+0(SB)/4, $0x3f800000
GLOBL f1<>(SB), RODATA|NOPTR, $4

// ABSMAX_BLOCK sets AX to the largest bits(x[i]) & 0x7fffffff over blk
// (R12, a multiple of 32) floats at SI, with 0x7fffffff in every lane of
// Y14. It clobbers
// BX, CX and Y0-Y5.
#define ABSMAX_BLOCK \
	MOVQ R12, CX \
	MOVQ SI, BX \
	VPXOR Y0, Y0, Y0 \
	VPXOR Y1, Y1, Y1 \
	VPXOR Y2, Y2, Y2 \
	VPXOR Y3, Y3, Y3 \
absmax_block_loop: \
	VPAND (BX), Y14, Y4 \
	VPAND 32(BX), Y14, Y5 \
	VPMAXUD Y4, Y0, Y0 \
	VPMAXUD Y5, Y1, Y1 \
	VPAND 64(BX), Y14, Y4 \
	VPAND 96(BX), Y14, Y5 \
	VPMAXUD Y4, Y2, Y2 \
	VPMAXUD Y5, Y3, Y3 \
	ADDQ $128, BX \
	SUBQ $32, CX \
	JNZ  absmax_block_loop \
	VPMAXUD Y1, Y0, Y0 \
	VPMAXUD Y3, Y2, Y2 \
	VPMAXUD Y2, Y0, Y0 \
	VEXTRACTI128 $1, Y0, X1 \
	VPMAXUD X1, X0, X0 \
	VPSHUFD $0x4e, X0, X1 \
	VPMAXUD X1, X0, X0 \
	VPSHUFD $0xb1, X0, X1 \
	VPMAXUD X1, X0, X0 \
	VMOVD X0, AX

// func absmaxBlocksAVX2(x *float32, nblk, blk int, scale *byte)
//
// Writes the largest bits(x[i]) & 0x7fffffff of each block of blk floats
// (a multiple of 32) to scale, 4 bytes per block.
TEXT ·absmaxBlocksAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ nblk+8(FP), R9
	MOVQ blk+16(FP), R12
	MOVQ scale+24(FP), DX
	MOVQ R12, R10
	SHLQ $2, R10
	XORQ R11, R11
	VPBROADCASTD absmask<>(SB), Y14

amb_block:
	ABSMAX_BLOCK
	MOVL AX, (DX)(R11*4)
	ADDQ R10, SI
	INCQ R11
	CMPQ R11, R9
	JNE  amb_block
	VZEROUPPER
	RET

// func quantI8BlocksAVX2(q *byte, x *float32, scale *byte, nblk, blk int)
//
// Per block of blk floats, its absmax (the bits in scale, 2^-100 <=
// absmax < +Inf): inv = float32(127)/absmax; then per 32 floats: VMULPS,
// VCVTPS2DQ, the signed packs (saturating to [-128, 127]), VPERMD back to
// element order, VPMAXSB with -127.
TEXT ·quantI8BlocksAVX2(SB), NOSPLIT, $0-40
	MOVQ q+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ scale+16(FP), DX
	MOVQ nblk+24(FP), R9
	MOVQ blk+32(FP), R12
	XORQ R11, R11
	VPBROADCASTD absmask<>(SB), Y14
	VMOVDQU permd<>(SB), Y13
	VPBROADCASTB minus127<>(SB), Y12

qi8b_block:
	MOVL (DX)(R11*4), AX
	VMOVD AX, X0
	VMOVSS f127<>(SB), X1
	VDIVSS X0, X1, X1
	VBROADCASTSS X1, Y7
	MOVQ R12, CX

qi8b_loop:
	VMULPS (SI), Y7, Y0
	VMULPS 32(SI), Y7, Y1
	VMULPS 64(SI), Y7, Y2
	VMULPS 96(SI), Y7, Y3
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y13, Y0
	VPMAXSB Y12, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $128, SI
	ADDQ $32, DI
	SUBQ $32, CX
	JNZ  qi8b_loop
	INCQ R11
	CMPQ R11, R9
	JNE  qi8b_block
	VZEROUPPER
	RET

// func dequantI8BlocksAVX2(x *float32, q *byte, scale *byte, nblk, blk int, div float32) (done int, maxAbs uint32)
//
// Per block: stop unless the scale's bits are below 0x7f000000 (0 <= s <
// 2^127); step = s/div; then per 32 codes: VPMOVSXBD, VCVTDQ2PS, VMULPS
// by step. maxAbs is the largest |code| (VPABSB: 128 for -128).
TEXT ·dequantI8BlocksAVX2(SB), NOSPLIT, $0-60
	MOVQ x+0(FP), DI
	MOVQ q+8(FP), SI
	MOVQ scale+16(FP), DX
	MOVQ nblk+24(FP), R9
	MOVQ blk+32(FP), R12
	XORQ R11, R11
	VPXOR Y5, Y5, Y5

di8b_block:
	CMPQ R11, R9
	JEQ  di8b_done
	MOVL (DX)(R11*4), AX
	CMPL AX, $0x7f000000
	JAE  di8b_done
	VMOVD AX, X0
	VDIVSS div+40(FP), X0, X0
	VBROADCASTSS X0, Y7
	MOVQ R12, CX

di8b_loop:
	VPABSB (SI), Y4
	VPMAXUB Y4, Y5, Y5
	VPMOVSXBD (SI), Y0
	VPMOVSXBD 8(SI), Y1
	VPMOVSXBD 16(SI), Y2
	VPMOVSXBD 24(SI), Y3
	VCVTDQ2PS Y0, Y0
	VCVTDQ2PS Y1, Y1
	VCVTDQ2PS Y2, Y2
	VCVTDQ2PS Y3, Y3
	VMULPS Y7, Y0, Y0
	VMULPS Y7, Y1, Y1
	VMULPS Y7, Y2, Y2
	VMULPS Y7, Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $32, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JNZ  di8b_loop
	INCQ R11
	JMP  di8b_block

di8b_done:
	VEXTRACTI128 $1, Y5, X4
	VPMAXUB X4, X5, X5
	VPSRLDQ $8, X5, X4
	VPMAXUB X4, X5, X5
	VPSRLDQ $4, X5, X4
	VPMAXUB X4, X5, X5
	VPSRLDQ $2, X5, X4
	VPMAXUB X4, X5, X5
	VPSRLDQ $1, X5, X4
	VPMAXUB X4, X5, X5
	VMOVD X5, AX
	ANDL $0xff, AX
	MOVQ R11, done+48(FP)
	MOVL AX, maxAbs+56(FP)
	VZEROUPPER
	RET

// func dequant4BlocksAVX2(x *float32, q *byte, scale *byte, nblk, blk int, codebook *[16]float32) (done int)
//
// Per block: stop unless the scale's bits are below 0x7f000000; lut =
// codebook * scale (16 VMULPS lanes); then per 16 codes: split the
// nibbles, two VPERMPS look up the low and high halves of the table, and
// bit 3 of the code, moved to the sign bit, picks one (VBLENDVPS).
TEXT ·dequant4BlocksAVX2(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), DI
	MOVQ q+8(FP), SI
	MOVQ scale+16(FP), DX
	MOVQ nblk+24(FP), R9
	MOVQ blk+32(FP), R12
	MOVQ codebook+40(FP), R8
	XORQ R11, R11
	VPBROADCASTB lownib<>(SB), X12

d4b_block:
	CMPQ R11, R9
	JEQ  d4b_done
	MOVL (DX)(R11*4), AX
	CMPL AX, $0x7f000000
	JAE  d4b_done
	VBROADCASTSS (DX)(R11*4), Y7
	VMULPS (R8), Y7, Y14
	VMULPS 32(R8), Y7, Y13
	MOVQ R12, CX

d4b_loop:
	VMOVQ (SI), X0
	VPSRLW $4, X0, X1
	VPAND X12, X0, X0
	VPAND X12, X1, X1
	VPUNPCKLBW X1, X0, X0
	VPMOVZXBD X0, Y1
	VPSRLDQ $8, X0, X0
	VPMOVZXBD X0, Y2
	VPERMPS Y14, Y1, Y3
	VPERMPS Y13, Y1, Y4
	VPSLLD $28, Y1, Y1
	VBLENDVPS Y1, Y4, Y3, Y3
	VPERMPS Y14, Y2, Y5
	VPERMPS Y13, Y2, Y6
	VPSLLD $28, Y2, Y2
	VBLENDVPS Y2, Y6, Y5, Y5
	VMOVUPS Y3, (DI)
	VMOVUPS Y5, 32(DI)
	ADDQ $8, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ  d4b_loop
	INCQ R11
	JMP  d4b_block

d4b_done:
	MOVQ R11, done+48(FP)
	VZEROUPPER
	RET

// NF4_GROUP codes 8 floats at off(SI): y = x*inv (Y15), then the 4-level
// binary search of searchTables with the tables in Y14 (first threshold),
// Y11, Y10 and Y9; c gets the codes, y and t are scratch. At each level
// c = 2c + (y > T[c]); VCMPPS gives -1 for true, so that is 2c - mask.
#define NF4_GROUP(off, y, t, c) \
	VMULPS off(SI), Y15, y \
	VCMPPS $0x1e, Y14, y, t \
	VPSRLD $31, t, c \
	VPERMPS Y11, c, t \
	VCMPPS $0x1e, t, y, t \
	VPADDD c, c, c \
	VPSUBD t, c, c \
	VPERMPS Y10, c, t \
	VCMPPS $0x1e, t, y, t \
	VPADDD c, c, c \
	VPSUBD t, c, c \
	VPERMPS Y9, c, t \
	VCMPPS $0x1e, t, y, t \
	VPADDD c, c, c \
	VPSUBD t, c, c

// FP4_GROUP codes 8 floats at off(SI): y = x*inv, the 3-level search on
// |y| (abs mask in Y8, tables in Y14, Y11 and Y10), then 8 when the sign
// bit of y is set (s is scratch).
#define FP4_GROUP(off, y, t, s, c) \
	VMULPS off(SI), Y15, y \
	VPSRLD $31, y, s \
	VPSLLD $3, s, s \
	VPAND Y8, y, y \
	VCMPPS $0x1e, Y14, y, t \
	VPSRLD $31, t, c \
	VPERMPS Y11, c, t \
	VCMPPS $0x1e, t, y, t \
	VPADDD c, c, c \
	VPSUBD t, c, c \
	VPERMPS Y10, c, t \
	VCMPPS $0x1e, t, y, t \
	VPADDD c, c, c \
	VPSUBD t, c, c \
	VPOR s, c, c

// PACK4 packs the 32 dword codes in Y0-Y3 (elements in order) into 16
// bytes at DI, two per byte, the first in the low nibble: back to bytes in
// element order (VPACKUS*, VPERMD with Y13), then VPMADDUBSW with (1, 16)
// pairs (Y12) makes c0 + 16*c1 per word, and VPACKUSWB/VPERMQ gather the
// 16 bytes.
#define PACK4 \
	VPACKUSDW Y1, Y0, Y0 \
	VPACKUSDW Y3, Y2, Y2 \
	VPACKUSWB Y2, Y0, Y0 \
	VPERMD Y0, Y13, Y0 \
	VPMADDUBSW Y12, Y0, Y0 \
	VPACKUSWB Y0, Y0, Y0 \
	VPERMQ $0x08, Y0, Y0 \
	VMOVDQU X0, (DI)

// QUANT4_BLOCK_START is the per-block head of the 4-bit kernels: Y15 =
// float32(1)/absmax (the bits in scale); CX = blk.
#define QUANT4_BLOCK_START \
	MOVL (DX)(R11*4), AX \
	VMOVD AX, X0 \
	VMOVSS f1<>(SB), X1 \
	VDIVSS X0, X1, X1 \
	VBROADCASTSS X1, Y15 \
	MOVQ R12, CX

// func quantNF4BlocksAVX2(q *byte, x *float32, scale *byte, nblk, blk int, search *[4][8]float32)
//
// Per block of blk floats, its absmax (the bits in scale, 2^-100 <=
// absmax < +Inf): inv = float32(1)/absmax; then per 32 floats the nf4
// codes of float32(x*inv), packed two per byte.
TEXT ·quantNF4BlocksAVX2(SB), NOSPLIT, $0-48
	MOVQ q+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ scale+16(FP), DX
	MOVQ nblk+24(FP), R13
	MOVQ blk+32(FP), R12
	MOVQ search+40(FP), R8
	XORQ R11, R11
	VPBROADCASTD absmask<>(SB), Y8
	VMOVDQU permd<>(SB), Y13
	VPBROADCASTW nibmul<>(SB), Y12
	VMOVUPS (R8), Y14
	VMOVUPS 32(R8), Y11
	VMOVUPS 64(R8), Y10
	VMOVUPS 96(R8), Y9

qnf4_block:
	QUANT4_BLOCK_START

qnf4_loop:
	NF4_GROUP(0, Y4, Y5, Y0)
	NF4_GROUP(32, Y6, Y7, Y1)
	NF4_GROUP(64, Y4, Y5, Y2)
	NF4_GROUP(96, Y6, Y7, Y3)
	PACK4
	ADDQ $128, SI
	ADDQ $16, DI
	SUBQ $32, CX
	JNZ  qnf4_loop
	INCQ R11
	CMPQ R11, R13
	JNE  qnf4_block
	VZEROUPPER
	RET

// func quantFP4BlocksAVX2(q *byte, x *float32, scale *byte, nblk, blk int, search *[4][8]float32)
//
// As quantNF4BlocksAVX2, with the fp4 codes.
TEXT ·quantFP4BlocksAVX2(SB), NOSPLIT, $0-48
	MOVQ q+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ scale+16(FP), DX
	MOVQ nblk+24(FP), R13
	MOVQ blk+32(FP), R12
	MOVQ search+40(FP), R8
	XORQ R11, R11
	VPBROADCASTD absmask<>(SB), Y8
	VMOVDQU permd<>(SB), Y13
	VPBROADCASTW nibmul<>(SB), Y12
	VMOVUPS (R8), Y14
	VMOVUPS 32(R8), Y11
	VMOVUPS 64(R8), Y10

qfp4_block:
	QUANT4_BLOCK_START

qfp4_loop:
	FP4_GROUP(0, Y4, Y5, Y9, Y0)
	FP4_GROUP(32, Y6, Y7, Y9, Y1)
	FP4_GROUP(64, Y4, Y5, Y9, Y2)
	FP4_GROUP(96, Y6, Y7, Y9, Y3)
	PACK4
	ADDQ $128, SI
	ADDQ $16, DI
	SUBQ $32, CX
	JNZ  qfp4_loop
	INCQ R11
	CMPQ R11, R13
	JNE  qfp4_block
	VZEROUPPER
	RET

DATA two24<>+0(SB)/4, $0x4b800000
DATA two24<>+4(SB)/4, $0x4b800000
DATA two24<>+8(SB)/4, $0x4b800000
DATA two24<>+12(SB)/4, $0x4b800000
DATA two24<>+16(SB)/4, $0x4b800000
DATA two24<>+20(SB)/4, $0x4b800000
DATA two24<>+24(SB)/4, $0x4b800000
DATA two24<>+28(SB)/4, $0x4b800000
GLOBL two24<>(SB), RODATA|NOPTR, $32

DATA eight<>+0(SB)/4, $8
DATA eight<>+4(SB)/4, $8
DATA eight<>+8(SB)/4, $8
DATA eight<>+12(SB)/4, $8
DATA eight<>+16(SB)/4, $8
DATA eight<>+20(SB)/4, $8
DATA eight<>+24(SB)/4, $8
DATA eight<>+28(SB)/4, $8
GLOBL eight<>(SB), RODATA|NOPTR, $32

DATA iota<>+0(SB)/4, $0
DATA iota<>+4(SB)/4, $1
DATA iota<>+8(SB)/4, $2
DATA iota<>+12(SB)/4, $3
DATA iota<>+16(SB)/4, $4
DATA iota<>+20(SB)/4, $5
DATA iota<>+24(SB)/4, $6
DATA iota<>+28(SB)/4, $7
GLOBL iota<>(SB), RODATA|NOPTR, $32

DATA hmul1<>+0(SB)/4, $0x7feb352d
DATA hmul1<>+4(SB)/4, $0x7feb352d
DATA hmul1<>+8(SB)/4, $0x7feb352d
DATA hmul1<>+12(SB)/4, $0x7feb352d
DATA hmul1<>+16(SB)/4, $0x7feb352d
DATA hmul1<>+20(SB)/4, $0x7feb352d
DATA hmul1<>+24(SB)/4, $0x7feb352d
DATA hmul1<>+28(SB)/4, $0x7feb352d
GLOBL hmul1<>(SB), RODATA|NOPTR, $32

DATA hmul2<>+0(SB)/4, $0x846ca68b
DATA hmul2<>+4(SB)/4, $0x846ca68b
DATA hmul2<>+8(SB)/4, $0x846ca68b
DATA hmul2<>+12(SB)/4, $0x846ca68b
DATA hmul2<>+16(SB)/4, $0x846ca68b
DATA hmul2<>+20(SB)/4, $0x846ca68b
DATA hmul2<>+24(SB)/4, $0x846ca68b
DATA hmul2<>+28(SB)/4, $0x846ca68b
GLOBL hmul2<>(SB), RODATA|NOPTR, $32

// ternmul: the byte pairs (1, 4) for VPMADDUBSW; ternmul2: the word pairs
// (1, 16) for VPMADDWD: four 2-bit codes c0..c3 become c0 + 4c1 + 16c2 +
// 64c3.
DATA ternmul<>+0(SB)/2, $0x0401
GLOBL ternmul<>(SB), RODATA|NOPTR, $2

DATA ternmul2<>+0(SB)/4, $0x00100001
GLOBL ternmul2<>(SB), RODATA|NOPTR, $4

// REDUCE_MAXUD sets AX to the largest dword of Y6 (clobbers X1).
#define REDUCE_MAXUD \
	VEXTRACTI128 $1, Y6, X1 \
	VPMAXUD X1, X6, X6 \
	VPSHUFD $0x4e, X6, X1 \
	VPMAXUD X1, X6, X6 \
	VPSHUFD $0xb1, X6, X1 \
	VPMAXUD X1, X6, X6 \
	VMOVD X6, AX

// CVT_ADD16 adds the 16 floats of Y2 (elements 0-7) and Y3 (8-15),
// converted to float64, to the partial sums in Y0 (lanes 0-3), Y1 (4-7),
// Y8 (8-11) and Y9 (12-15); SQ is empty or squares them (VMULPD).
#define CVT_ADD16(SQ) \
	VCVTPS2PD X2, Y4 \
	VEXTRACTF128 $1, Y2, X5 \
	VCVTPS2PD X5, Y5 \
	VCVTPS2PD X3, Y10 \
	VEXTRACTF128 $1, Y3, X11 \
	VCVTPS2PD X11, Y11 \
	SQ \
	VADDPD Y4, Y0, Y0 \
	VADDPD Y5, Y1, Y1 \
	VADDPD Y10, Y8, Y8 \
	VADDPD Y11, Y9, Y9

#define SQUARE \
	VMULPD Y4, Y4, Y4 \
	VMULPD Y5, Y5, Y5 \
	VMULPD Y10, Y10, Y10 \
	VMULPD Y11, Y11, Y11

#define NOSQUARE

#define LOAD_ACC16 \
	VMOVUPD (DI), Y0 \
	VMOVUPD 32(DI), Y1 \
	VMOVUPD 64(DI), Y8 \
	VMOVUPD 96(DI), Y9

#define STORE_ACC16 \
	VMOVUPD Y0, (DI) \
	VMOVUPD Y1, 32(DI) \
	VMOVUPD Y8, 64(DI) \
	VMOVUPD Y9, 96(DI)

// func sums16AVX2(x *float32, n int, sq bool, acc *[16]float64) (maxBits uint32)
//
// acc[i%16] += |x[i]| (sq: x[i]^2) in float64, in element order, n a
// multiple of 16 (> 0). maxBits is the largest bits(x[i]) & 0x7fffffff.
TEXT ·sums16AVX2(SB), NOSPLIT, $0-36
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVBLZX sq+16(FP), R8
	MOVQ acc+24(FP), DI
	LOAD_ACC16
	VPBROADCASTD absmask<>(SB), Y7
	VPXOR Y6, Y6, Y6
	TESTQ R8, R8
	JNZ   sums16_sq

sums16_abs:
	VPAND (SI), Y7, Y2
	VPAND 32(SI), Y7, Y3
	VPMAXUD Y2, Y6, Y6
	VPMAXUD Y3, Y6, Y6
	CVT_ADD16(NOSQUARE)
	ADDQ $64, SI
	SUBQ $16, CX
	JNZ  sums16_abs
	JMP  sums16_done

sums16_sq:
	VPAND (SI), Y7, Y2
	VPAND 32(SI), Y7, Y3
	VPMAXUD Y2, Y6, Y6
	VPMAXUD Y3, Y6, Y6
	CVT_ADD16(SQUARE)
	ADDQ $64, SI
	SUBQ $16, CX
	JNZ  sums16_sq

sums16_done:
	STORE_ACC16
	REDUCE_MAXUD
	VZEROUPPER
	MOVL AX, maxBits+32(FP)
	RET

// func sumAboveAVX2(x *float32, n int, tb uint32, acc *[16]float64) (count int)
//
// For |x[i]| > t (tb the bits of t; bits compared as signed dwords, both
// below 2^31): acc[i%16] += |x[i]| in float64, in element order (the
// others add +0), and count them; n a multiple of 16 (> 0).
TEXT ·sumAboveAVX2(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL tb+16(FP), AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	MOVQ acc+24(FP), DI
	LOAD_ACC16
	VPBROADCASTD absmask<>(SB), Y7
	VPXOR Y6, Y6, Y6

sumabove_loop:
	VPAND (SI), Y7, Y2
	VPAND 32(SI), Y7, Y3
	VPCMPGTD Y13, Y2, Y4
	VPCMPGTD Y13, Y3, Y5
	VPAND Y4, Y2, Y2
	VPAND Y5, Y3, Y3
	VPSUBD Y4, Y6, Y6
	VPSUBD Y5, Y6, Y6
	CVT_ADD16(NOSQUARE)
	ADDQ $64, SI
	SUBQ $16, CX
	JNZ  sumabove_loop

	STORE_ACC16
	VEXTRACTI128 $1, Y6, X1
	VPADDD X1, X6, X6
	VPSHUFD $0x4e, X6, X1
	VPADDD X1, X6, X6
	VPSHUFD $0xb1, X6, X1
	VPADDD X1, X6, X6
	VMOVD X6, AX
	VZEROUPPER
	MOVQ AX, count+32(FP)
	RET

// func packSignsAVX2(q *byte, x *float32, n int)
//
// Bit i%8 of q[i/8] = the sign bit of x[i], n a multiple of 32 (> 0):
// VMOVMSKPS of 4 vectors makes 4 bytes.
TEXT ·packSignsAVX2(SB), NOSPLIT, $0-24
	MOVQ q+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX

packsigns_loop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VMOVMSKPS Y0, AX
	VMOVMSKPS Y1, BX
	VMOVMSKPS Y2, R8
	VMOVMSKPS Y3, R9
	SHLL $8, BX
	SHLL $16, R8
	SHLL $24, R9
	ORL  BX, AX
	ORL  R8, AX
	ORL  R9, AX
	MOVL AX, (DI)
	ADDQ $128, SI
	ADDQ $4, DI
	SUBQ $32, CX
	JNZ  packsigns_loop
	VZEROUPPER
	RET

// TERN_GROUP sets the dwords of c to the ternary codes of 8 floats at
// off(SI): g = (|x| > t) as 0/1 (VPCMPGTD on the bits, Y5 = tb), then
// g << (sign bit): 1 for +, 2 for -, 0 when not above t. Y7 is the abs
// mask, Y8 zero; Y4 and Y6 are scratch.
#define TERN_GROUP(off, c) \
	VMOVUPS off(SI), Y4 \
	VPAND Y7, Y4, c \
	VPCMPGTD Y5, c, c \
	VPSUBD c, Y8, c \
	VPSRLD $31, Y4, Y6 \
	VPSLLVD Y6, c, c

// func packTernaryAVX2(q *byte, x *float32, n int, tb uint32)
//
// The 2-bit ternary codes of x, four per byte LSB first, n a multiple of
// 32 (> 0): 32 dword codes back to bytes in element order, VPMADDUBSW
// (1, 4) and VPMADDWD (1, 16) make c0 + 4c1 + 16c2 + 64c3 per dword, and
// the packs gather the 8 bytes.
TEXT ·packTernaryAVX2(SB), NOSPLIT, $0-28
	MOVQ q+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL tb+24(FP), AX
	VMOVD AX, X5
	VPBROADCASTD X5, Y5
	VPBROADCASTD absmask<>(SB), Y7
	VPXOR Y8, Y8, Y8
	VMOVDQU permd<>(SB), Y13
	VPBROADCASTW ternmul<>(SB), Y12
	VPBROADCASTD ternmul2<>(SB), Y11

packtern_loop:
	TERN_GROUP(0, Y0)
	TERN_GROUP(32, Y1)
	TERN_GROUP(64, Y2)
	TERN_GROUP(96, Y3)
	VPACKUSDW Y1, Y0, Y0
	VPACKUSDW Y3, Y2, Y2
	VPACKUSWB Y2, Y0, Y0
	VPERMD Y0, Y13, Y0
	VPMADDUBSW Y12, Y0, Y0
	VPMADDWD Y11, Y0, Y0
	VPACKUSDW Y0, Y0, Y0
	VPACKUSWB Y0, Y0, Y0
	VPERMD Y0, Y13, Y0
	VMOVQ X0, (DI)
	ADDQ $128, SI
	ADDQ $8, DI
	SUBQ $32, CX
	JNZ  packtern_loop
	VZEROUPPER
	RET

// QSGD_GROUP sets the dwords of c to the signed QSGD levels of 8 floats at
// off(SI) (see quantQSGD): V = int32(float32(|x|*k) * 2^24) truncated, h
// = lowbias32(j + key), l = min((V + h>>8) >> 24, s), then the sign of x
// (VPSIGND: x is never NaN, and l is 0 for a zero x). Y15 = k, Y14 = abs
// mask, Y12 = key, Y11 = j (advanced by 8), Y9 = s; Y4-Y6 are scratch.
#define QSGD_GROUP(off, c) \
	VMOVUPS off(SI), Y4 \
	VPAND Y14, Y4, Y5 \
	VMULPS Y15, Y5, Y5 \
	VMULPS two24<>(SB), Y5, Y5 \
	VCVTTPS2DQ Y5, Y5 \
	VPADDD Y12, Y11, c \
	VPADDD eight<>(SB), Y11, Y11 \
	VPSRLD $16, c, Y6 \
	VPXOR Y6, c, c \
	VPMULLD hmul1<>(SB), c, c \
	VPSRLD $15, c, Y6 \
	VPXOR Y6, c, c \
	VPMULLD hmul2<>(SB), c, c \
	VPSRLD $16, c, Y6 \
	VPXOR Y6, c, c \
	VPSRLD $8, c, c \
	VPADDD Y5, c, c \
	VPSRLD $24, c, c \
	VPMINUD Y9, c, c \
	VPSIGND Y4, c, c

// func quantQSGDAVX2(q *byte, x *float32, n int, k float32, key, j0, s uint32)
//
// q[i] = the signed level of x[i] with index j0+i (uint32, wrapping as
// the Go loop's uint32(j) does), n a multiple of 32 (> 0).
TEXT ·quantQSGDAVX2(SB), NOSPLIT, $0-40
	MOVQ q+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS k+24(FP), Y15
	VPBROADCASTD absmask<>(SB), Y14
	MOVL key+28(FP), AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	MOVL j0+32(FP), AX
	VMOVD AX, X11
	VPBROADCASTD X11, Y11
	VPADDD iota<>(SB), Y11, Y11
	MOVL s+36(FP), AX
	VMOVD AX, X9
	VPBROADCASTD X9, Y9
	VMOVDQU permd<>(SB), Y13

qsgd_loop:
	QSGD_GROUP(0, Y0)
	QSGD_GROUP(32, Y1)
	QSGD_GROUP(64, Y2)
	QSGD_GROUP(96, Y3)
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y13, Y0
	VMOVDQU Y0, (DI)
	ADDQ $128, SI
	ADDQ $32, DI
	SUBQ $32, CX
	JNZ  qsgd_loop
	VZEROUPPER
	RET

DATA signshift<>+0(SB)/4, $31
DATA signshift<>+4(SB)/4, $30
DATA signshift<>+8(SB)/4, $29
DATA signshift<>+12(SB)/4, $28
DATA signshift<>+16(SB)/4, $27
DATA signshift<>+20(SB)/4, $26
DATA signshift<>+24(SB)/4, $25
DATA signshift<>+28(SB)/4, $24
GLOBL signshift<>(SB), RODATA|NOPTR, $32

DATA ternshift<>+0(SB)/4, $0
DATA ternshift<>+4(SB)/4, $2
DATA ternshift<>+8(SB)/4, $4
DATA ternshift<>+12(SB)/4, $6
DATA ternshift<>+16(SB)/4, $8
DATA ternshift<>+20(SB)/4, $10
DATA ternshift<>+24(SB)/4, $12
DATA ternshift<>+28(SB)/4, $14
GLOBL ternshift<>(SB), RODATA|NOPTR, $32

DATA signbit<>+0(SB)/4, $0x80000000
GLOBL signbit<>(SB), RODATA|NOPTR, $4

DATA three<>+0(SB)/4, $3
GLOBL three<>(SB), RODATA|NOPTR, $4

// SIGN_GROUP writes 8 floats at off(DI) from the 8 bits of byte boff(SI):
// each bit moved to bit 31 (VPSLLVD by 31-j, Y13), masked (Y12), ORed
// with the scale's bits (Y15).
#define SIGN_GROUP(boff, off) \
	VPBROADCASTB boff(SI), Y0 \
	VPSLLVD Y13, Y0, Y0 \
	VPAND Y12, Y0, Y0 \
	VPOR Y15, Y0, Y0 \
	VMOVUPS Y0, off(DI)

// func signDequantAVX2(x *float32, q *byte, n int, sbits uint32)
//
// x[i] = the float with bits sbits | (bit i of q) << 31, n a multiple of
// 32 (> 0).
TEXT ·signDequantAVX2(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), DI
	MOVQ q+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL sbits+24(FP), AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	VMOVDQU signshift<>(SB), Y13
	VPBROADCASTD signbit<>(SB), Y12

signdeq_loop:
	SIGN_GROUP(0, 0)
	SIGN_GROUP(1, 32)
	SIGN_GROUP(2, 64)
	SIGN_GROUP(3, 96)
	ADDQ $4, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JNZ  signdeq_loop
	VZEROUPPER
	RET

// TERN_DEQ_GROUP writes 8 floats at off(DI) from the 2-bit codes in the
// word at boff(SI): codes by VPSRLVD (Y13) and a mask of 3 (Y12), values
// by VPERMPS from Y15 = [0, s, -s, 0, ...]; codes equal to 3 are ORed
// into Y11.
#define TERN_DEQ_GROUP(boff, off) \
	VPBROADCASTW boff(SI), Y0 \
	VPSRLVD Y13, Y0, Y0 \
	VPAND Y12, Y0, Y0 \
	VPCMPEQD Y12, Y0, Y1 \
	VPOR Y1, Y11, Y11 \
	VPERMPS Y15, Y0, Y0 \
	VMOVUPS Y0, off(DI)

// func ternaryDequantAVX2(x *float32, q *byte, n int, lut *[8]uint32) (bad uint32)
//
// x[i] = lut[code i] (the bits), the codes four per byte LSB first, n a
// multiple of 32 (> 0); bad is non-zero when a code is 3.
TEXT ·ternaryDequantAVX2(SB), NOSPLIT, $0-36
	MOVQ x+0(FP), DI
	MOVQ q+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ lut+24(FP), R8
	VMOVDQU (R8), Y15
	VMOVDQU ternshift<>(SB), Y13
	VPBROADCASTD three<>(SB), Y12
	VPXOR Y11, Y11, Y11

terndeq_loop:
	TERN_DEQ_GROUP(0, 0)
	TERN_DEQ_GROUP(2, 32)
	TERN_DEQ_GROUP(4, 64)
	TERN_DEQ_GROUP(6, 96)
	ADDQ $8, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JNZ  terndeq_loop
	VPMOVMSKB Y11, AX
	VZEROUPPER
	MOVL AX, bad+32(FP)
	RET
