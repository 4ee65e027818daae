package cabi

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/testvectors"
)

// BenchmarkEncode is Encode into a reused buffer: the Go side of a call
// from Python, without ctypes. BenchmarkEncodeFresh allocates the output
// every call, as tp.encode returns new bytes.
func BenchmarkEncode(b *testing.B)      { benchEncode(b, false) }
func BenchmarkEncodeFresh(b *testing.B) { benchEncode(b, true) }

func benchEncode(b *testing.B, fresh bool) {
	for _, n := range []int{256, 16 << 20} {
		for _, rec := range []string{"", "*:zstd(1)", "int8(4096) | q:huff0"} {
			b.Run(fmt.Sprintf("%dB/%q", 4*n, rec), func(b *testing.B) {
				ct := testvectors.Normal("w", n, 0.02, 1)
				d, done := desc(ct)
				defer done()
				out := make([]byte, codec.MaxTensorLen(ct))
				rp, rn := cstr(rec)
				b.SetBytes(int64(len(ct.Data)))
				b.ReportAllocs()
				for b.Loop() {
					if fresh {
						out = make([]byte, len(out))
					}
					if _, _, code, msg := Encode(d, rp, rn, 0, CRCAlways, unsafe.Pointer(&out[0]), int64(len(out))); code != OK {
						b.Fatal(msg)
					}
				}
			})
		}
	}
}

// BenchmarkDecode is DecodeInfo and DecodeInto into a reused buffer;
// BenchmarkDecodeFresh into a new one every call, as tp.decode returns a
// new array.
func BenchmarkDecode(b *testing.B)      { benchDecode(b, false) }
func BenchmarkDecodeFresh(b *testing.B) { benchDecode(b, true) }

func benchDecode(b *testing.B, fresh bool) {
	for _, n := range []int{256, 16 << 20} {
		for _, rec := range []string{"", "*:zstd(1)", "int8(4096) | q:huff0"} {
			b.Run(fmt.Sprintf("%dB/%q", 4*n, rec), func(b *testing.B) {
				ct := testvectors.Normal("w", n, 0.02, 1)
				frame := encodeGo(&testing.T{}, ct, rec, 0, codec.MaxTensorLen(ct))
				dst := codec.AlignedBytes(len(ct.Data))
				info := make([]byte, 256)
				b.SetBytes(int64(len(ct.Data)))
				b.ReportAllocs()
				for b.Loop() {
					if fresh {
						dst = codec.AlignedBytes(len(ct.Data))
					}
					buf := Buf{Data: unsafe.Pointer(&dst[0]), Cap: int64(len(dst))}
					DecodeInfo(unsafe.Pointer(&frame[0]), int64(len(frame)), nil, 0, unsafe.Pointer(&info[0]), 256)
					if _, code, msg := DecodeInto(unsafe.Pointer(&frame[0]), int64(len(frame)), nil, 0, &buf, 1); code != OK {
						b.Fatal(msg)
					}
				}
			})
		}
	}
}

// BenchmarkEncodeParallel is Encode of 16 MiB (*:zstd(1)) from every
// goroutine at once, each into its own buffer: run with -cpu 1,2 for the
// speed-up Go itself gets from a second core, beside Python's two threads.
func BenchmarkEncodeParallel(b *testing.B) {
	ct := testvectors.Normal("w", 4<<20, 0.02, 2)
	d, done := desc(ct)
	defer done()
	rp, rn := cstr("*:zstd(1)")
	b.SetBytes(int64(len(ct.Data)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		out := make([]byte, codec.MaxTensorLen(ct))
		for pb.Next() {
			if _, _, code, msg := Encode(d, rp, rn, 0, CRCAlways, unsafe.Pointer(&out[0]), int64(len(out))); code != OK {
				b.Error(msg)
				return
			}
		}
	})
}
