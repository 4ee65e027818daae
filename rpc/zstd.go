package rpc

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/encoding"
)

// ZstdName is the standard name of zstd in grpc-encoding.
const ZstdName = "zstd"

// registerZstd registers a Zstd compressor under "zstd" unless another
// package registered one first: the name is a convention between peers,
// not ours (github.com/mostynb/go-grpc-compression uses it too, and both
// speak standard frames, so either serves).
func registerZstd() {
	if encoding.GetCompressor(ZstdName) != nil {
		return
	}
	encoding.RegisterCompressor(NewZstd())
}

// Zstd is a gRPC encoding.Compressor of standard zstd frames (RFC 8878),
// streaming on both sides: the sender's encoder holds a window, not the
// message (the message is written as it comes, in one frame), and the
// receiver's decoder refuses frames that declare more than MaxDecoded or
// a window above MaxWindow before it allocates. Encoders and decoders are
// pooled and go back to their pool when gRPC closes them; they start no
// goroutines, so one that is dropped holds nothing.
type Zstd struct {
	// Level of the encoder (default zstd.SpeedFastest, level 1).
	Level zstd.EncoderLevel
	// MaxDecoded bounds the decoded size a frame may declare (default
	// 1 GiB; gRPC's receive limit bounds the message as well).
	MaxDecoded uint64
	// MaxWindow bounds the window a frame may ask for (default 8 MiB,
	// what zstd's levels up to 19 use).
	MaxWindow uint64

	once sync.Once
	encs sync.Pool // *zstdWriter
	decs sync.Pool // *zstdReader
}

// NewZstd returns a Zstd compressor with the defaults.
func NewZstd() *Zstd { return &Zstd{} }

// Name implements encoding.Compressor.
func (z *Zstd) Name() string { return ZstdName }

func (z *Zstd) defaults() {
	z.once.Do(func() {
		if z.Level == 0 {
			z.Level = zstd.SpeedFastest
		}
		if z.MaxDecoded == 0 {
			z.MaxDecoded = 1 << 30
		}
		if z.MaxWindow == 0 {
			z.MaxWindow = 8 << 20
		}
	})
}

type zstdWriter struct {
	z *Zstd
	e *zstd.Encoder
}

// Compress implements encoding.Compressor.
func (z *Zstd) Compress(w io.Writer) (io.WriteCloser, error) {
	z.defaults()
	zw, _ := z.encs.Get().(*zstdWriter)
	if zw == nil {
		e, err := zstd.NewWriter(w, zstd.WithEncoderLevel(z.Level), zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(1<<20), zstd.WithEncoderCRC(true))
		if err != nil {
			return nil, fmt.Errorf("rpc: zstd encoder: %w", err)
		}
		return &zstdWriter{z: z, e: e}, nil
	}
	zw.e.Reset(w)
	return zw, nil
}

func (w *zstdWriter) Write(p []byte) (int, error) { return w.e.Write(p) }

// Close ends the frame and returns the encoder to its pool.
func (w *zstdWriter) Close() error {
	err := w.e.Close()
	w.e.Reset(nil)
	w.z.encs.Put(w)
	return err
}

type zstdReader struct {
	z *Zstd
	d *zstd.Decoder
}

// Decompress implements encoding.Compressor.
func (z *Zstd) Decompress(r io.Reader) (io.Reader, error) {
	z.defaults()
	zr, _ := z.decs.Get().(*zstdReader)
	if zr == nil {
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(z.MaxDecoded), zstd.WithDecoderMaxWindow(z.MaxWindow))
		if err != nil {
			return nil, fmt.Errorf("rpc: zstd decoder: %w", err)
		}
		return &zstdReader{z: z, d: d}, nil
	}
	if err := zr.d.Reset(r); err != nil {
		return nil, fmt.Errorf("rpc: zstd decoder: %w", err)
	}
	return zr, nil
}

func (r *zstdReader) Read(p []byte) (int, error) {
	n, err := r.d.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = fmt.Errorf("rpc: zstd message: %w", err)
	}
	return n, err
}

// Close returns the decoder to its pool (gRPC calls it once).
func (r *zstdReader) Close() error {
	r.d.Reset(nil)
	r.z.decs.Put(r)
	return nil
}
