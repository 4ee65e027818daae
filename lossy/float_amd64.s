//go:build amd64 && !noasm && gc

// AVX2 / F16C kernels of the fp16 and bf16 stages; see float_amd64.go and
// the reference loops in float.go. Each handles n elements, n a multiple
// of 32, with unaligned loads and stores.

#include "textflag.h"

// 16-bit lanes.
DATA halfAbs16<>+0(SB)/8, $0x7fff7fff7fff7fff
DATA halfAbs16<>+8(SB)/8, $0x7fff7fff7fff7fff
DATA halfAbs16<>+16(SB)/8, $0x7fff7fff7fff7fff
DATA halfAbs16<>+24(SB)/8, $0x7fff7fff7fff7fff
GLOBL halfAbs16<>(SB), RODATA|NOPTR, $32

DATA halfInf16<>+0(SB)/8, $0x7c007c007c007c00
DATA halfInf16<>+8(SB)/8, $0x7c007c007c007c00
DATA halfInf16<>+16(SB)/8, $0x7c007c007c007c00
DATA halfInf16<>+24(SB)/8, $0x7c007c007c007c00
GLOBL halfInf16<>(SB), RODATA|NOPTR, $32

DATA halfPayload16<>+0(SB)/8, $0x01ff01ff01ff01ff
DATA halfPayload16<>+8(SB)/8, $0x01ff01ff01ff01ff
DATA halfPayload16<>+16(SB)/8, $0x01ff01ff01ff01ff
DATA halfPayload16<>+24(SB)/8, $0x01ff01ff01ff01ff
GLOBL halfPayload16<>(SB), RODATA|NOPTR, $32

// 32-bit lanes.

DATA halfBias32<>+0(SB)/8, $0x00007fff00007fff
DATA halfBias32<>+8(SB)/8, $0x00007fff00007fff
DATA halfBias32<>+16(SB)/8, $0x00007fff00007fff
DATA halfBias32<>+24(SB)/8, $0x00007fff00007fff
GLOBL halfBias32<>(SB), RODATA|NOPTR, $32

DATA halfOne32<>+0(SB)/8, $0x0000000100000001
DATA halfOne32<>+8(SB)/8, $0x0000000100000001
DATA halfOne32<>+16(SB)/8, $0x0000000100000001
DATA halfOne32<>+24(SB)/8, $0x0000000100000001
GLOBL halfOne32<>(SB), RODATA|NOPTR, $32

// FP16NAN clears the payload of the NaN lanes of the 16 fp16 patterns in
// y, with scratch t: VCVTPS2PH gives sign | 0x7e00 | payload>>13 for a
// NaN, torch gives sign | 0x7e00. t = (|y| > 0x7c00) & 0x01ff, y &^= t.
// Constants in Y13 (0x7fff), Y14 (0x7c00), Y15 (0x01ff).
#define FP16NAN(y, t) \
	VPAND    Y13, y, t \
	VPCMPGTW Y14, t, t \
	VPAND    Y15, t, t \
	VPANDN   y, t, y

// FP16ENC converts 32 floats at SI to fp16 at DI, storing with ST
// (VMOVDQU, or VMOVNTDQ for a 32-byte aligned DI). VCVTPS2PH with
// immediate 0 (round to nearest even, whatever MXCSR says) narrows 8
// floats into 8 fp16 patterns, with gradual underflow and overflow to
// Inf; two results are joined into one register and their NaNs fixed up.
#define FP16ENC(ST) \
	VMOVUPS     (SI), Y0 \
	VMOVUPS     32(SI), Y1 \
	VMOVUPS     64(SI), Y2 \
	VMOVUPS     96(SI), Y3 \
	VCVTPS2PH   $0, Y0, X4 \
	VCVTPS2PH   $0, Y1, X5 \
	VCVTPS2PH   $0, Y2, X6 \
	VCVTPS2PH   $0, Y3, X7 \
	VINSERTI128 $1, X5, Y4, Y4 \
	VINSERTI128 $1, X7, Y6, Y6 \
	FP16NAN(Y4, Y8) \
	FP16NAN(Y6, Y9) \
	ST          Y4, (DI) \
	ST          Y6, 32(DI) \
	ADDQ        $128, SI \
	ADDQ        $64, DI

// func fp16EncodeF16C(dst, src *byte, n int)
//
// Reference loop: encode f32 for fp16 (float.go).
TEXT ·fp16EncodeF16C(SB), NOSPLIT, $0-24
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    n+16(FP), CX
	VMOVDQU halfAbs16<>(SB), Y13
	VMOVDQU halfInf16<>(SB), Y14
	VMOVDQU halfPayload16<>(SB), Y15

encloop:
	FP16ENC(VMOVDQU)
	SUBQ $32, CX
	JNZ  encloop
	VZEROUPPER
	RET

// func fp16EncodeF16CNT(dst, src *byte, n int): fp16EncodeF16C with
// non-temporal stores; dst must be 32-byte aligned.
TEXT ·fp16EncodeF16CNT(SB), NOSPLIT, $0-24
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    n+16(FP), CX
	VMOVDQU halfAbs16<>(SB), Y13
	VMOVDQU halfInf16<>(SB), Y14
	VMOVDQU halfPayload16<>(SB), Y15

encloopnt:
	FP16ENC(VMOVNTDQ)
	SUBQ $32, CX
	JNZ  encloopnt
	SFENCE
	VZEROUPPER
	RET

// FP16DEC converts 32 fp16 patterns at SI to floats at DI, storing with
// ST. VCVTPH2PS widens 8 patterns at a time, exactly, quieting
// signalling NaNs as torch does.
#define FP16DEC(ST) \
	VCVTPH2PS (SI), Y0 \
	VCVTPH2PS 16(SI), Y1 \
	VCVTPH2PS 32(SI), Y2 \
	VCVTPH2PS 48(SI), Y3 \
	ST        Y0, (DI) \
	ST        Y1, 32(DI) \
	ST        Y2, 64(DI) \
	ST        Y3, 96(DI) \
	ADDQ      $64, SI \
	ADDQ      $128, DI

// func fp16DecodeF16C(dst, src *byte, n int)
//
// Reference loop: decode f32 for fp16.
TEXT ·fp16DecodeF16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

decloop:
	FP16DEC(VMOVUPS)
	SUBQ $32, CX
	JNZ  decloop
	VZEROUPPER
	RET

// func fp16DecodeF16CNT(dst, src *byte, n int): fp16DecodeF16C with
// non-temporal stores; dst must be 32-byte aligned.
TEXT ·fp16DecodeF16CNT(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

decloopnt:
	FP16DEC(VMOVNTPS)
	SUBQ $32, CX
	JNZ  decloopnt
	SFENCE
	VZEROUPPER
	RET

// BF16RNE rounds the 8 float32 bit patterns in x to bfloat16, in the low
// half of each 32-bit lane (the high half zero), with scratch t:
// x = (x + 0x7fff + (x>>16 & 1)) >> 16. Constants in Y14 (0x7fff) and
// Y15 (1). NaNs are left to BF16ENC.
#define BF16RNE(x, t) \
	VPSRLD $16, x, t \
	VPAND  Y15, t, t \
	VPADDD Y14, t, t \
	VPADDD x, t, x \
	VPSRLD $16, x, x

// BF16ENC converts 32 floats at SI to bfloat16 at DI, storing with ST.
// VCMPPS $3 (unordered) marks the NaN lanes with all ones; after
// BF16RNE, VPACKUSDW packs pairs of registers (the values fit in 16 bits,
// so nothing saturates) and VPACKSSDW packs the masks the same way
// (all ones stays all ones), in the order lo0-3 hi0-3 lo4-7 hi4-7; ORing
// the masks in makes every NaN 0xffff, as torch's AVX2 kernel does, and
// VPERMQ $0xd8 puts the quadwords in order.
#define BF16ENC(ST) \
	VMOVDQU   (SI), Y0 \
	VMOVDQU   32(SI), Y1 \
	VMOVDQU   64(SI), Y2 \
	VMOVDQU   96(SI), Y3 \
	VCMPPS    $3, Y0, Y0, Y8 \
	VCMPPS    $3, Y1, Y1, Y9 \
	VCMPPS    $3, Y2, Y2, Y10 \
	VCMPPS    $3, Y3, Y3, Y11 \
	BF16RNE(Y0, Y4) \
	BF16RNE(Y1, Y5) \
	BF16RNE(Y2, Y6) \
	BF16RNE(Y3, Y7) \
	VPACKUSDW Y1, Y0, Y0 \
	VPACKUSDW Y3, Y2, Y2 \
	VPACKSSDW Y9, Y8, Y8 \
	VPACKSSDW Y11, Y10, Y10 \
	VPOR      Y8, Y0, Y0 \
	VPOR      Y10, Y2, Y2 \
	VPERMQ    $0xd8, Y0, Y0 \
	VPERMQ    $0xd8, Y2, Y2 \
	ST        Y0, (DI) \
	ST        Y2, 32(DI) \
	ADDQ      $128, SI \
	ADDQ      $64, DI

// func bf16EncodeAVX2(dst, src *byte, n int)
//
// Reference loop: encode f32 for bf16.
TEXT ·bf16EncodeAVX2(SB), NOSPLIT, $0-24
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    n+16(FP), CX
	VMOVDQU halfBias32<>(SB), Y14
	VMOVDQU halfOne32<>(SB), Y15

bencloop:
	BF16ENC(VMOVDQU)
	SUBQ $32, CX
	JNZ  bencloop
	VZEROUPPER
	RET

// func bf16EncodeAVX2NT(dst, src *byte, n int): bf16EncodeAVX2 with
// non-temporal stores; dst must be 32-byte aligned.
TEXT ·bf16EncodeAVX2NT(SB), NOSPLIT, $0-24
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    n+16(FP), CX
	VMOVDQU halfBias32<>(SB), Y14
	VMOVDQU halfOne32<>(SB), Y15

bencloopnt:
	BF16ENC(VMOVNTDQ)
	SUBQ $32, CX
	JNZ  bencloopnt
	SFENCE
	VZEROUPPER
	RET

// BF16DEC converts 32 bfloat16 patterns at SI to floats at DI, storing
// with ST: zero-extend 8 patterns to 32 bits and shift them into the top
// half.
#define BF16DEC(ST) \
	VPMOVZXWD (SI), Y0 \
	VPMOVZXWD 16(SI), Y1 \
	VPMOVZXWD 32(SI), Y2 \
	VPMOVZXWD 48(SI), Y3 \
	VPSLLD    $16, Y0, Y0 \
	VPSLLD    $16, Y1, Y1 \
	VPSLLD    $16, Y2, Y2 \
	VPSLLD    $16, Y3, Y3 \
	ST        Y0, (DI) \
	ST        Y1, 32(DI) \
	ST        Y2, 64(DI) \
	ST        Y3, 96(DI) \
	ADDQ      $64, SI \
	ADDQ      $128, DI

// func bf16DecodeAVX2(dst, src *byte, n int)
//
// Reference loop: decode f32 for bf16.
TEXT ·bf16DecodeAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

bdecloop:
	BF16DEC(VMOVDQU)
	SUBQ $32, CX
	JNZ  bdecloop
	VZEROUPPER
	RET

// func bf16DecodeAVX2NT(dst, src *byte, n int): bf16DecodeAVX2 with
// non-temporal stores; dst must be 32-byte aligned.
TEXT ·bf16DecodeAVX2NT(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

bdecloopnt:
	BF16DEC(VMOVNTDQ)
	SUBQ $32, CX
	JNZ  bdecloopnt
	SFENCE
	VZEROUPPER
	RET
