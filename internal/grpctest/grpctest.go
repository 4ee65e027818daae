// Package grpctest holds what the gRPC tests and their peer programs
// share: a codec that moves messages as raw bytes, and an echo service
// registered without generated code (an unknown-service handler), so that
// compressors are tested on real gRPC connections with any message size.
package grpctest

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// EchoMethod is the full method name the echo handler serves.
const EchoMethod = "/tensorpress.test.Echo/Echo"

// RawCodec is a grpc encoding.Codec whose messages are *[]byte.
type RawCodec struct{}

// Name implements encoding.Codec.
func (RawCodec) Name() string { return "raw" }

// Marshal implements encoding.Codec.
func (RawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("grpctest: marshal %T, want *[]byte", v)
	}
	return *b, nil
}

// Unmarshal implements encoding.Codec.
func (RawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("grpctest: unmarshal into %T, want *[]byte", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

// ServerOptions make a server answer every call as an echo: the message
// back, compressed as the request was.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodec(RawCodec{}),
		grpc.UnknownServiceHandler(func(_ any, s grpc.ServerStream) error {
			var m []byte
			if err := s.RecvMsg(&m); err != nil {
				return err
			}
			return s.SendMsg(&m)
		}),
		grpc.MaxRecvMsgSize(256 << 20),
		grpc.MaxSendMsgSize(256 << 20),
	}
}

// CallOptions are the options of an echo call with the compressor name.
func CallOptions(compressor string) []grpc.CallOption {
	return []grpc.CallOption{grpc.ForceCodec(RawCodec{}), grpc.UseCompressor(compressor),
		grpc.MaxCallRecvMsgSize(256 << 20), grpc.MaxCallSendMsgSize(256 << 20)}
}

// Message returns n bytes that compress somewhat, as model weights do:
// float32 values of a slowly varying signal with noise in the low bits.
func Message(n int) []byte {
	b := make([]byte, n)
	x := uint32(0x9e3779b9)
	for i := 0; i+4 <= n; i += 4 {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		v := 0x3c000000 | uint32(i/4%4096)<<11 | x&0x7ff // exponent fixed, mantissa drifting
		b[i], b[i+1], b[i+2], b[i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	for i := n &^ 3; i < n; i++ {
		b[i] = byte(i)
	}
	return b
}

// Serve serves s on an in-memory listener (bufconn) and returns a client
// connection to it; both are closed, and s stopped, when the test ends.
func Serve(t testing.TB, s *grpc.Server, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	ln := bufconn.Listen(1 << 20)
	go s.Serve(ln)
	opts = append([]grpc.DialOption{
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return ln.Dial() }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, opts...)
	conn, err := grpc.NewClient("passthrough:///bufconn", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		s.Stop()
	})
	return conn
}

// SparseMessage returns a message of float32 values, 99% of them zero
// (the others N(0, 0.02), seeded), after four header bytes that start a
// protobuf field (0x0a, then a length prefix that is not checked): a
// sparse gradient as an opaque message.
func SparseMessage(floats int) []byte {
	r := rand.New(rand.NewPCG(5, 6))
	msg := append(make([]byte, 0, 4+4*floats), 0x0a, 0x80, 0x80, 0x04)
	for range floats {
		v := float32(0)
		if r.IntN(100) == 0 {
			v = float32(r.NormFloat64() * 0.02)
		}
		msg = binary.LittleEndian.AppendUint32(msg, math.Float32bits(v))
	}
	return msg
}
