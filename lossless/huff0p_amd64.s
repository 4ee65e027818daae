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

// func huff0pPackAVX2(pairs, src *byte, bc *[32][32]byte, mask *uint32, n int)
//
// Per 32 input bytes x: the code c = 15 ^ OR over i of (x == sym_i) &
// (i ^ 15), bc[2i] holding sym_i in every byte and bc[2i+1] i ^ 15 (0 for
// an unused i, which then changes nothing); as words w = c_even | c_odd<<8,
// the pair is (w<<4 | w>>8) & 0xff, packed to 16 bytes. VPCMPEQB with 15
// marks the escapes (the caller ignores them where 15 is a value's code).
TEXT ·huff0pPackAVX2(SB), NOSPLIT, $0-40
	MOVQ pairs+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ bc+16(FP), R11
	MOVQ mask+24(FP), R8
	MOVQ n+32(FP), DX
	MOVQ $0x0f0f0f0f0f0f0f0f, R10
	MOVQ R10, X15
	VPBROADCASTQ X15, Y15 // 15 in every byte
	MOVQ $0x00ff00ff00ff00ff, R10
	MOVQ R10, X14
	VPBROADCASTQ X14, Y14 // 0x00ff words
	XORQ R9, R9

ploop:
	CMPQ R9, DX
	JAE  pdone
	VMOVDQU (SI), Y0
	VMOVDQA Y15, Y2

#define SYM(i) \
	VPCMPEQB (64*i)(R11), Y0, Y1; \
	VPAND    (64*i+32)(R11), Y1, Y1; \
	VPXOR    Y1, Y2, Y2

	SYM(0)
	SYM(1)
	SYM(2)
	SYM(3)
	SYM(4)
	SYM(5)
	SYM(6)
	SYM(7)
	SYM(8)
	SYM(9)
	SYM(10)
	SYM(11)
	SYM(12)
	SYM(13)
	SYM(14)
	SYM(15)
#undef SYM

	VPCMPEQB Y15, Y2, Y3
	VPMOVMSKB Y3, AX
	MOVL    AX, (R8)
	VPSLLW  $4, Y2, Y4
	VPSRLW  $8, Y2, Y5
	VPOR    Y5, Y4, Y4
	VPAND   Y14, Y4, Y4
	VPACKUSWB Y4, Y4, Y4
	VPERMQ  $0x08, Y4, Y4
	VMOVDQU X4, (DI)
	ADDQ    $32, SI
	ADDQ    $16, DI
	ADDQ    $4, R8
	ADDQ    $32, R9
	JMP     ploop

pdone:
	VZEROUPPER
	RET
