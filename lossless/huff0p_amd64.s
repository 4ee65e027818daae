//go:build amd64 && !noasm && gc

// AVX2 kernel of huff0p; see huff0p_amd64.go. n is a multiple of 32.

#include "textflag.h"

// func huff0pExpandAVX2(dst, pairs *byte, tab *[16]byte, k int, mask *uint32, n int)
//
// Per 16 pair bytes (32 output bytes): the high and low nibbles apart,
// VPUNPCKL/HBW interleave them in output order (high first), VPSHUFB looks
// each up in tab (in both lanes), VPCMPGTB against k-1 marks the escapes
// and VPMOVMSKB packs those marks into one 32-bit mask word.
TEXT ·huff0pExpandAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ pairs+8(FP), SI
	MOVQ tab+16(FP), AX
	MOVQ k+24(FP), BX
	MOVQ mask+32(FP), R8
	MOVQ n+40(FP), DX
	VBROADCASTI128 (AX), Y15 // tab in both lanes
	DECQ BX
	MOVQ BX, X14
	VPBROADCASTB X14, Y14    // k-1 in every byte
	MOVQ $0x0f0f0f0f0f0f0f0f, R10
	MOVQ R10, X13
	VPBROADCASTQ X13, X13    // 0x0f bytes
	XORQ R9, R9

loop:
	CMPQ R9, DX
	JAE  done
	VMOVDQU (SI), X0
	VPSRLW  $4, X0, X1
	VPAND   X13, X1, X1      // high nibbles: codes of even bytes
	VPAND   X13, X0, X2      // low nibbles: codes of odd bytes
	VPUNPCKLBW X2, X1, X3    // codes of bytes 0-15
	VPUNPCKHBW X2, X1, X4    // codes of bytes 16-31
	VINSERTI128 $1, X4, Y3, Y3
	VPSHUFB Y3, Y15, Y5
	VMOVDQU Y5, (DI)
	VPCMPGTB Y14, Y3, Y6
	VPMOVMSKB Y6, AX
	MOVL    AX, (R8)
	ADDQ    $16, SI
	ADDQ    $32, DI
	ADDQ    $4, R8
	ADDQ    $32, R9
	JMP     loop

done:
	VZEROUPPER
	RET
