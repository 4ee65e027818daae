//go:build amd64 && !noasm && gc

// AVX2 byte-shuffle kernels; see shuffle_amd64.go and the reference loops in
// shuffle.go. Each handles n elements, n a multiple of 32.

#include "textflag.h"

// Per-lane VPSHUFB masks (the same 16 bytes in both lanes).
// evenodd: bytes 0,2,...,14 then 1,3,...,15 (2x8 byte transpose).
DATA evenodd<>+0(SB)/8, $0x0e0c0a0806040200
DATA evenodd<>+8(SB)/8, $0x0f0d0b0907050301
DATA evenodd<>+16(SB)/8, $0x0e0c0a0806040200
DATA evenodd<>+24(SB)/8, $0x0f0d0b0907050301
GLOBL evenodd<>(SB), RODATA|NOPTR, $32

// interleave: bytes 0,8,1,9,...,7,15 (8x2 byte transpose).
DATA interleave<>+0(SB)/8, $0x0b030a0209010800
DATA interleave<>+8(SB)/8, $0x0f070e060d050c04
DATA interleave<>+16(SB)/8, $0x0b030a0209010800
DATA interleave<>+24(SB)/8, $0x0f070e060d050c04
GLOBL interleave<>(SB), RODATA|NOPTR, $32

// transpose4: bytes 0,4,8,12,1,5,9,13,... (4x4 byte transpose).
DATA transpose4<>+0(SB)/8, $0x0d0905010c080400
DATA transpose4<>+8(SB)/8, $0x0f0b07030e0a0602
DATA transpose4<>+16(SB)/8, $0x0d0905010c080400
DATA transpose4<>+24(SB)/8, $0x0f0b07030e0a0602
GLOBL transpose4<>(SB), RODATA|NOPTR, $32

// func shuffle2AVX2(p0, p1, src *byte, n int)
//
// Per 32 elements (64 bytes): Y0 gets elements 0-7 and 16-23 (one 128-bit
// lane each), Y1 elements 8-15 and 24-31; VPSHUFB evenodd gathers, per
// lane, byte 0 of its 8 elements in the low quadword and byte 1 in the
// high one; VPUNPCKL/HQDQ then pair the lanes' quadwords into 32 bytes of
// plane 0 and of plane 1, in element order.
TEXT ·shuffle2AVX2(SB), NOSPLIT, $0-32
	MOVQ p0+0(FP), AX
	MOVQ p1+8(FP), BX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), DX
	VMOVDQU evenodd<>(SB), Y15
	XORQ R9, R9

loop2:
	CMPQ R9, DX
	JAE  done2
	VMOVDQU     (SI), X0
	VINSERTI128 $1, 32(SI), Y0, Y0
	VMOVDQU     16(SI), X1
	VINSERTI128 $1, 48(SI), Y1, Y1
	VPSHUFB     Y15, Y0, Y0
	VPSHUFB     Y15, Y1, Y1
	VPUNPCKLQDQ Y1, Y0, Y2
	VPUNPCKHQDQ Y1, Y0, Y3
	VMOVDQU     Y2, (AX)(R9*1)
	VMOVDQU     Y3, (BX)(R9*1)
	ADDQ        $64, SI
	ADDQ        $32, R9
	JMP         loop2

done2:
	VZEROUPPER
	RET

// func unshuffle2AVX2(dst, p0, p1 *byte, n int)
//
// shuffle2AVX2 backwards: unpack the planes' quadwords into lanes holding
// 8 elements' bytes 0 then 1, interleave them with VPSHUFB, and put the
// lanes back in element order with VPERM2I128.
TEXT ·unshuffle2AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ p0+8(FP), AX
	MOVQ p1+16(FP), BX
	MOVQ n+24(FP), DX
	VMOVDQU interleave<>(SB), Y15
	XORQ R9, R9

uloop2:
	CMPQ R9, DX
	JAE  udone2
	VMOVDQU     (AX)(R9*1), Y0
	VMOVDQU     (BX)(R9*1), Y1
	VPUNPCKLQDQ Y1, Y0, Y2
	VPUNPCKHQDQ Y1, Y0, Y3
	VPSHUFB     Y15, Y2, Y2
	VPSHUFB     Y15, Y3, Y3
	VPERM2I128  $0x20, Y3, Y2, Y4
	VPERM2I128  $0x31, Y3, Y2, Y5
	VMOVDQU     Y4, (DI)
	VMOVDQU     Y5, 32(DI)
	ADDQ        $64, DI
	ADDQ        $32, R9
	JMP         uloop2

udone2:
	VZEROUPPER
	RET

// func unshuffle2AVX2NT: unshuffle2AVX2 with non-temporal stores, for outputs too big
// to stay in cache (see shuffleNTMin); every store address must be a
// multiple of 32.
TEXT ·unshuffle2AVX2NT(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ p0+8(FP), AX
	MOVQ p1+16(FP), BX
	MOVQ n+24(FP), DX
	VMOVDQU interleave<>(SB), Y15
	XORQ R9, R9

uloop2nt:
	CMPQ R9, DX
	JAE  udone2nt
	VMOVDQU     (AX)(R9*1), Y0
	VMOVDQU     (BX)(R9*1), Y1
	VPUNPCKLQDQ Y1, Y0, Y2
	VPUNPCKHQDQ Y1, Y0, Y3
	VPSHUFB     Y15, Y2, Y2
	VPSHUFB     Y15, Y3, Y3
	VPERM2I128  $0x20, Y3, Y2, Y4
	VPERM2I128  $0x31, Y3, Y2, Y5
	VMOVNTDQ    Y4, (DI)
	VMOVNTDQ    Y5, 32(DI)
	ADDQ        $64, DI
	ADDQ        $32, R9
	JMP         uloop2nt

udone2nt:
	SFENCE
	VZEROUPPER
	RET

// func shuffle4AVX2(p0, p1, p2, p3, src *byte, n int)
//
// Per 32 elements (128 bytes): Yi gets elements 4i..4i+3 in its low lane
// and 16+4i..19+4i in its high lane; VPSHUFB transpose4 turns each lane
// into 4 dwords, dword k holding byte k of the lane's 4 elements; a 4x4
// dword transpose across Y0..Y3 (VPUNPCKL/HDQ, then L/HQDQ) leaves plane k
// of all 32 elements, in order, in one register.
TEXT ·shuffle4AVX2(SB), NOSPLIT, $0-48
	MOVQ p0+0(FP), AX
	MOVQ p1+8(FP), BX
	MOVQ p2+16(FP), CX
	MOVQ p3+24(FP), DX
	MOVQ src+32(FP), SI
	MOVQ n+40(FP), R8
	VMOVDQU transpose4<>(SB), Y15
	XORQ R9, R9

loop4:
	CMPQ R9, R8
	JAE  done4
	VMOVDQU     (SI), X0
	VINSERTI128 $1, 64(SI), Y0, Y0
	VMOVDQU     16(SI), X1
	VINSERTI128 $1, 80(SI), Y1, Y1
	VMOVDQU     32(SI), X2
	VINSERTI128 $1, 96(SI), Y2, Y2
	VMOVDQU     48(SI), X3
	VINSERTI128 $1, 112(SI), Y3, Y3
	VPSHUFB     Y15, Y0, Y0
	VPSHUFB     Y15, Y1, Y1
	VPSHUFB     Y15, Y2, Y2
	VPSHUFB     Y15, Y3, Y3
	VPUNPCKLDQ  Y1, Y0, Y4
	VPUNPCKHDQ  Y1, Y0, Y5
	VPUNPCKLDQ  Y3, Y2, Y6
	VPUNPCKHDQ  Y3, Y2, Y7
	VPUNPCKLQDQ Y6, Y4, Y0
	VPUNPCKHQDQ Y6, Y4, Y1
	VPUNPCKLQDQ Y7, Y5, Y2
	VPUNPCKHQDQ Y7, Y5, Y3
	VMOVDQU     Y0, (AX)(R9*1)
	VMOVDQU     Y1, (BX)(R9*1)
	VMOVDQU     Y2, (CX)(R9*1)
	VMOVDQU     Y3, (DX)(R9*1)
	ADDQ        $128, SI
	ADDQ        $32, R9
	JMP         loop4

done4:
	VZEROUPPER
	RET

// func unshuffle4AVX2(dst, p0, p1, p2, p3 *byte, n int)
//
// shuffle4AVX2 backwards (both transposes are their own inverses), with
// VPERM2I128 putting the lanes back in element order.
TEXT ·unshuffle4AVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ p0+8(FP), AX
	MOVQ p1+16(FP), BX
	MOVQ p2+24(FP), CX
	MOVQ p3+32(FP), DX
	MOVQ n+40(FP), R8
	VMOVDQU transpose4<>(SB), Y15
	XORQ R9, R9

uloop4:
	CMPQ R9, R8
	JAE  udone4
	VMOVDQU     (AX)(R9*1), Y0
	VMOVDQU     (BX)(R9*1), Y1
	VMOVDQU     (CX)(R9*1), Y2
	VMOVDQU     (DX)(R9*1), Y3
	VPUNPCKLDQ  Y1, Y0, Y4
	VPUNPCKHDQ  Y1, Y0, Y5
	VPUNPCKLDQ  Y3, Y2, Y6
	VPUNPCKHDQ  Y3, Y2, Y7
	VPUNPCKLQDQ Y6, Y4, Y0
	VPUNPCKHQDQ Y6, Y4, Y1
	VPUNPCKLQDQ Y7, Y5, Y2
	VPUNPCKHQDQ Y7, Y5, Y3
	VPSHUFB     Y15, Y0, Y0
	VPSHUFB     Y15, Y1, Y1
	VPSHUFB     Y15, Y2, Y2
	VPSHUFB     Y15, Y3, Y3
	VPERM2I128  $0x20, Y1, Y0, Y4
	VPERM2I128  $0x20, Y3, Y2, Y5
	VPERM2I128  $0x31, Y1, Y0, Y6
	VPERM2I128  $0x31, Y3, Y2, Y7
	VMOVDQU     Y4, (DI)
	VMOVDQU     Y5, 32(DI)
	VMOVDQU     Y6, 64(DI)
	VMOVDQU     Y7, 96(DI)
	ADDQ        $128, DI
	ADDQ        $32, R9
	JMP         uloop4

udone4:
	VZEROUPPER
	RET

// func unshuffle4AVX2NT: unshuffle4AVX2 with non-temporal stores, for outputs too big
// to stay in cache (see shuffleNTMin); every store address must be a
// multiple of 32.
TEXT ·unshuffle4AVX2NT(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ p0+8(FP), AX
	MOVQ p1+16(FP), BX
	MOVQ p2+24(FP), CX
	MOVQ p3+32(FP), DX
	MOVQ n+40(FP), R8
	VMOVDQU transpose4<>(SB), Y15
	XORQ R9, R9

uloop4nt:
	CMPQ R9, R8
	JAE  udone4nt
	VMOVDQU     (AX)(R9*1), Y0
	VMOVDQU     (BX)(R9*1), Y1
	VMOVDQU     (CX)(R9*1), Y2
	VMOVDQU     (DX)(R9*1), Y3
	VPUNPCKLDQ  Y1, Y0, Y4
	VPUNPCKHDQ  Y1, Y0, Y5
	VPUNPCKLDQ  Y3, Y2, Y6
	VPUNPCKHDQ  Y3, Y2, Y7
	VPUNPCKLQDQ Y6, Y4, Y0
	VPUNPCKHQDQ Y6, Y4, Y1
	VPUNPCKLQDQ Y7, Y5, Y2
	VPUNPCKHQDQ Y7, Y5, Y3
	VPSHUFB     Y15, Y0, Y0
	VPSHUFB     Y15, Y1, Y1
	VPSHUFB     Y15, Y2, Y2
	VPSHUFB     Y15, Y3, Y3
	VPERM2I128  $0x20, Y1, Y0, Y4
	VPERM2I128  $0x20, Y3, Y2, Y5
	VPERM2I128  $0x31, Y1, Y0, Y6
	VPERM2I128  $0x31, Y3, Y2, Y7
	VMOVNTDQ    Y4, (DI)
	VMOVNTDQ    Y5, 32(DI)
	VMOVNTDQ    Y6, 64(DI)
	VMOVNTDQ    Y7, 96(DI)
	ADDQ        $128, DI
	ADDQ        $32, R9
	JMP         uloop4nt

udone4nt:
	SFENCE
	VZEROUPPER
	RET

// transpose8 transposes the 8x8 matrix of 16-bit words held, per 128-bit
// lane, in Y0..Y7 (row i in Yi). Row k of the result ends up in
// Y9, Y10, Y11, Y12, Y13, Y14, Y0, Y1 (k = 0..7). Clobbers Y2..Y8.
#define TRANSPOSE8 \
	VPUNPCKLWD  Y1, Y0, Y8  \
	VPUNPCKHWD  Y1, Y0, Y9  \
	VPUNPCKLWD  Y3, Y2, Y10 \
	VPUNPCKHWD  Y3, Y2, Y11 \
	VPUNPCKLWD  Y5, Y4, Y12 \
	VPUNPCKHWD  Y5, Y4, Y13 \
	VPUNPCKLWD  Y7, Y6, Y14 \
	VPUNPCKHWD  Y7, Y6, Y0  \
	VPUNPCKLDQ  Y10, Y8, Y1 \
	VPUNPCKHDQ  Y10, Y8, Y2 \
	VPUNPCKLDQ  Y11, Y9, Y3 \
	VPUNPCKHDQ  Y11, Y9, Y4 \
	VPUNPCKLDQ  Y14, Y12, Y5 \
	VPUNPCKHDQ  Y14, Y12, Y6 \
	VPUNPCKLDQ  Y0, Y13, Y7 \
	VPUNPCKHDQ  Y0, Y13, Y8 \
	VPUNPCKLQDQ Y5, Y1, Y9  \
	VPUNPCKHQDQ Y5, Y1, Y10 \
	VPUNPCKLQDQ Y6, Y2, Y11 \
	VPUNPCKHQDQ Y6, Y2, Y12 \
	VPUNPCKLQDQ Y7, Y3, Y13 \
	VPUNPCKHQDQ Y7, Y3, Y14 \
	VPUNPCKLQDQ Y8, Y4, Y0  \
	VPUNPCKHQDQ Y8, Y4, Y1

// func shuffle8AVX2(p0, p1, p2, p3, p4, p5, p6, p7, src *byte, n int)
//
// Per 32 elements (256 bytes): Yi gets elements 2i, 2i+1 in its low lane
// and 16+2i, 17+2i in its high lane; VPSHUFB interleave makes word k of a
// lane hold byte k of its 2 elements; TRANSPOSE8 leaves plane k of all 32
// elements, in order, in one register.
TEXT ·shuffle8AVX2(SB), NOSPLIT, $0-80
	MOVQ p0+0(FP), AX
	MOVQ p1+8(FP), BX
	MOVQ p2+16(FP), CX
	MOVQ p3+24(FP), DX
	MOVQ p4+32(FP), R10
	MOVQ p5+40(FP), R11
	MOVQ p6+48(FP), R12
	MOVQ p7+56(FP), R13
	MOVQ src+64(FP), SI
	MOVQ n+72(FP), R8
	VMOVDQU interleave<>(SB), Y15
	XORQ R9, R9

loop8:
	CMPQ R9, R8
	JAE  done8
	VMOVDQU     (SI), X0
	VINSERTI128 $1, 128(SI), Y0, Y0
	VMOVDQU     16(SI), X1
	VINSERTI128 $1, 144(SI), Y1, Y1
	VMOVDQU     32(SI), X2
	VINSERTI128 $1, 160(SI), Y2, Y2
	VMOVDQU     48(SI), X3
	VINSERTI128 $1, 176(SI), Y3, Y3
	VMOVDQU     64(SI), X4
	VINSERTI128 $1, 192(SI), Y4, Y4
	VMOVDQU     80(SI), X5
	VINSERTI128 $1, 208(SI), Y5, Y5
	VMOVDQU     96(SI), X6
	VINSERTI128 $1, 224(SI), Y6, Y6
	VMOVDQU     112(SI), X7
	VINSERTI128 $1, 240(SI), Y7, Y7
	VPSHUFB     Y15, Y0, Y0
	VPSHUFB     Y15, Y1, Y1
	VPSHUFB     Y15, Y2, Y2
	VPSHUFB     Y15, Y3, Y3
	VPSHUFB     Y15, Y4, Y4
	VPSHUFB     Y15, Y5, Y5
	VPSHUFB     Y15, Y6, Y6
	VPSHUFB     Y15, Y7, Y7
	TRANSPOSE8
	VMOVDQU     Y9, (AX)(R9*1)
	VMOVDQU     Y10, (BX)(R9*1)
	VMOVDQU     Y11, (CX)(R9*1)
	VMOVDQU     Y12, (DX)(R9*1)
	VMOVDQU     Y13, (R10)(R9*1)
	VMOVDQU     Y14, (R11)(R9*1)
	VMOVDQU     Y0, (R12)(R9*1)
	VMOVDQU     Y1, (R13)(R9*1)
	ADDQ        $256, SI
	ADDQ        $32, R9
	JMP         loop8

done8:
	VZEROUPPER
	RET

// func unshuffle8AVX2(dst, p0, p1, p2, p3, p4, p5, p6, p7 *byte, n int)
//
// shuffle8AVX2 backwards, with VPERM2I128 putting the lanes back in
// element order.
TEXT ·unshuffle8AVX2(SB), NOSPLIT, $0-80
	MOVQ dst+0(FP), DI
	MOVQ p0+8(FP), AX
	MOVQ p1+16(FP), BX
	MOVQ p2+24(FP), CX
	MOVQ p3+32(FP), DX
	MOVQ p4+40(FP), R10
	MOVQ p5+48(FP), R11
	MOVQ p6+56(FP), R12
	MOVQ p7+64(FP), R13
	MOVQ n+72(FP), R8
	VMOVDQU evenodd<>(SB), Y15
	XORQ R9, R9

uloop8:
	CMPQ R9, R8
	JAE  udone8
	VMOVDQU (AX)(R9*1), Y0
	VMOVDQU (BX)(R9*1), Y1
	VMOVDQU (CX)(R9*1), Y2
	VMOVDQU (DX)(R9*1), Y3
	VMOVDQU (R10)(R9*1), Y4
	VMOVDQU (R11)(R9*1), Y5
	VMOVDQU (R12)(R9*1), Y6
	VMOVDQU (R13)(R9*1), Y7
	TRANSPOSE8
	VPSHUFB    Y15, Y9, Y9
	VPSHUFB    Y15, Y10, Y10
	VPSHUFB    Y15, Y11, Y11
	VPSHUFB    Y15, Y12, Y12
	VPSHUFB    Y15, Y13, Y13
	VPSHUFB    Y15, Y14, Y14
	VPSHUFB    Y15, Y0, Y0
	VPSHUFB    Y15, Y1, Y1
	VPERM2I128 $0x20, Y10, Y9, Y2
	VPERM2I128 $0x31, Y10, Y9, Y3
	VPERM2I128 $0x20, Y12, Y11, Y4
	VPERM2I128 $0x31, Y12, Y11, Y5
	VPERM2I128 $0x20, Y14, Y13, Y6
	VPERM2I128 $0x31, Y14, Y13, Y7
	VPERM2I128 $0x20, Y1, Y0, Y8
	VPERM2I128 $0x31, Y1, Y0, Y9
	VMOVDQU    Y2, (DI)
	VMOVDQU    Y4, 32(DI)
	VMOVDQU    Y6, 64(DI)
	VMOVDQU    Y8, 96(DI)
	VMOVDQU    Y3, 128(DI)
	VMOVDQU    Y5, 160(DI)
	VMOVDQU    Y7, 192(DI)
	VMOVDQU    Y9, 224(DI)
	ADDQ       $256, DI
	ADDQ       $32, R9
	JMP        uloop8

udone8:
	VZEROUPPER
	RET

// func unshuffle8AVX2NT: unshuffle8AVX2 with non-temporal stores, for outputs too big
// to stay in cache (see shuffleNTMin); every store address must be a
// multiple of 32.
TEXT ·unshuffle8AVX2NT(SB), NOSPLIT, $0-80
	MOVQ dst+0(FP), DI
	MOVQ p0+8(FP), AX
	MOVQ p1+16(FP), BX
	MOVQ p2+24(FP), CX
	MOVQ p3+32(FP), DX
	MOVQ p4+40(FP), R10
	MOVQ p5+48(FP), R11
	MOVQ p6+56(FP), R12
	MOVQ p7+64(FP), R13
	MOVQ n+72(FP), R8
	VMOVDQU evenodd<>(SB), Y15
	XORQ R9, R9

uloop8nt:
	CMPQ R9, R8
	JAE  udone8nt
	VMOVDQU (AX)(R9*1), Y0
	VMOVDQU (BX)(R9*1), Y1
	VMOVDQU (CX)(R9*1), Y2
	VMOVDQU (DX)(R9*1), Y3
	VMOVDQU (R10)(R9*1), Y4
	VMOVDQU (R11)(R9*1), Y5
	VMOVDQU (R12)(R9*1), Y6
	VMOVDQU (R13)(R9*1), Y7
	TRANSPOSE8
	VPSHUFB    Y15, Y9, Y9
	VPSHUFB    Y15, Y10, Y10
	VPSHUFB    Y15, Y11, Y11
	VPSHUFB    Y15, Y12, Y12
	VPSHUFB    Y15, Y13, Y13
	VPSHUFB    Y15, Y14, Y14
	VPSHUFB    Y15, Y0, Y0
	VPSHUFB    Y15, Y1, Y1
	VPERM2I128 $0x20, Y10, Y9, Y2
	VPERM2I128 $0x31, Y10, Y9, Y3
	VPERM2I128 $0x20, Y12, Y11, Y4
	VPERM2I128 $0x31, Y12, Y11, Y5
	VPERM2I128 $0x20, Y14, Y13, Y6
	VPERM2I128 $0x31, Y14, Y13, Y7
	VPERM2I128 $0x20, Y1, Y0, Y8
	VPERM2I128 $0x31, Y1, Y0, Y9
	VMOVNTDQ   Y2, (DI)
	VMOVNTDQ   Y4, 32(DI)
	VMOVNTDQ   Y6, 64(DI)
	VMOVNTDQ   Y8, 96(DI)
	VMOVNTDQ   Y3, 128(DI)
	VMOVNTDQ   Y5, 160(DI)
	VMOVNTDQ   Y7, 192(DI)
	VMOVNTDQ   Y9, 224(DI)
	ADDQ       $256, DI
	ADDQ       $32, R9
	JMP        uloop8nt

udone8nt:
	SFENCE
	VZEROUPPER
	RET
