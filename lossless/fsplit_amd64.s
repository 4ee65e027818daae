//go:build amd64 && !noasm && gc

// AVX2 kernels of fsplit on bfloat16; see fsplit_amd64.go and the pure-Go
// loops of fsplit.go. Each handles n elements, n a multiple of 32.

#include "textflag.h"

// func fsplitBF16AVX2(exp, sm, src *byte, n int)
//
// Per 32 elements (64 bytes, 16-bit words w): exp = w>>7 & 0xff and
// sm = w>>8 & 0x80 | w & 0x7f as words, packed to bytes (VPACKUSWB packs
// per 128-bit lane: elements 0-7, 16-23 | 8-15, 24-31; VPERMQ 0xD8 puts
// the quadwords back in element order).
TEXT ·fsplitBF16AVX2(SB), NOSPLIT, $0-32
	MOVQ exp+0(FP), AX
	MOVQ sm+8(FP), BX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), DX
	MOVQ $0x00ff00ff00ff00ff, R10
	MOVQ R10, X15
	VPBROADCASTQ X15, Y15 // 0x00ff words
	MOVQ $0x0080008000800080, R10
	MOVQ R10, X14
	VPBROADCASTQ X14, Y14 // 0x0080 words
	MOVQ $0x007f007f007f007f, R10
	MOVQ R10, X13
	VPBROADCASTQ X13, Y13 // 0x007f words
	XORQ R9, R9

loop:
	CMPQ R9, DX
	JAE  done
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	VPSRLW  $7, Y0, Y2
	VPAND   Y15, Y2, Y2
	VPSRLW  $7, Y1, Y3
	VPAND   Y15, Y3, Y3
	VPACKUSWB Y3, Y2, Y2
	VPERMQ  $0xD8, Y2, Y2
	VMOVDQU Y2, (AX)
	VPSRLW  $8, Y0, Y4
	VPAND   Y14, Y4, Y4
	VPAND   Y13, Y0, Y5
	VPOR    Y5, Y4, Y4
	VPSRLW  $8, Y1, Y6
	VPAND   Y14, Y6, Y6
	VPAND   Y13, Y1, Y7
	VPOR    Y7, Y6, Y6
	VPACKUSWB Y6, Y4, Y4
	VPERMQ  $0xD8, Y4, Y4
	VMOVDQU Y4, (BX)
	ADDQ    $64, SI
	ADDQ    $32, AX
	ADDQ    $32, BX
	ADDQ    $32, R9
	JMP     loop

done:
	VZEROUPPER
	RET

// func fjoinBF16AVX2(dst, exp, sm *byte, n int)
//
// Per 32 elements: VPUNPCKL/HBW interleave sm and exp bytes into words
// w = exp<<8 | sm (per lane: elements 0-7, 16-23 and 8-15, 24-31), each
// becomes w>>1 & 0x7f80 | w<<8 & 0x8000 | w & 0x7f, and VPERM2I128 puts
// the lanes back in element order.
TEXT ·fjoinBF16AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ exp+8(FP), AX
	MOVQ sm+16(FP), BX
	MOVQ n+24(FP), DX
	MOVQ $0x7f807f807f807f80, R10
	MOVQ R10, X15
	VPBROADCASTQ X15, Y15 // 0x7f80 words
	MOVQ $0x8000800080008000, R10
	MOVQ R10, X14
	VPBROADCASTQ X14, Y14 // 0x8000 words
	MOVQ $0x007f007f007f007f, R10
	MOVQ R10, X13
	VPBROADCASTQ X13, Y13 // 0x007f words
	XORQ R9, R9

jloop:
	CMPQ R9, DX
	JAE  jdone
	VMOVDQU (AX), Y0
	VMOVDQU (BX), Y1
	VPUNPCKLBW Y0, Y1, Y2
	VPUNPCKHBW Y0, Y1, Y3
	VPSRLW  $1, Y2, Y4
	VPAND   Y15, Y4, Y4
	VPSLLW  $8, Y2, Y5
	VPAND   Y14, Y5, Y5
	VPAND   Y13, Y2, Y2
	VPOR    Y4, Y2, Y2
	VPOR    Y5, Y2, Y2
	VPSRLW  $1, Y3, Y6
	VPAND   Y15, Y6, Y6
	VPSLLW  $8, Y3, Y7
	VPAND   Y14, Y7, Y7
	VPAND   Y13, Y3, Y3
	VPOR    Y6, Y3, Y3
	VPOR    Y7, Y3, Y3
	VPERM2I128 $0x20, Y3, Y2, Y8
	VPERM2I128 $0x31, Y3, Y2, Y9
	VMOVDQU Y8, (DI)
	VMOVDQU Y9, 32(DI)
	ADDQ    $64, DI
	ADDQ    $32, AX
	ADDQ    $32, BX
	ADDQ    $32, R9
	JMP     jloop

jdone:
	VZEROUPPER
	RET
