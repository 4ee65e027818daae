package hub

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/internal/grpctest"
	"github.com/tensorpress/tensorpress/internal/netsim"
)

// Batched fetch against one RPC per tensor (OpenFL before it batched), on
// loopback TCP with a simulated round trip (5 ms added each way): 8
// clients fetch a model of 160 tensors (every fourth 64-192 KiB, the rest
// small; about 4.6 MiB) at once, all of it, every tensor checked.
//
//	go test -run '^$' -bench FetchModel -benchtime 5x ./hub
//
// "per-tensor" serves each tensor's bytes as they are for a request that
// names it (raw gRPC messages, no protobuf), "per-tensor-gzip" the same
// with grpc-go's gzip. Metrics: RPCs per fetch of the model by 8 clients.

const benchRTT = 10 * time.Millisecond

// shapedListener delays what the server writes by half the round trip.
type shapedListener struct{ net.Listener }

func (l shapedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return netsim.Shape(c, netsim.Link{Latency: benchRTT / 2}), nil
}

// benchServer serves on loopback with the round trip and returns a client
// connection (its writes delayed by the other half) and the RPC count.
func benchServer(b *testing.B, opts []grpc.ServerOption, register func(*grpc.Server)) (*grpc.ClientConn, *atomic.Int64) {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var rpcs atomic.Int64
	opts = append(opts, countRPCs(&rpcs)...)
	s := grpc.NewServer(opts...)
	register(s)
	go s.Serve(shapedListener{ln})
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return netsim.Shape(c, netsim.Link{Latency: benchRTT / 2}), nil
		}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		conn.Close()
		s.Stop()
	})
	return conn, &rpcs
}

// eightClients runs fetch for 8 clients at once and reports the RPCs per
// round.
func eightClients(b *testing.B, rpcs *atomic.Int64, fetch func() error) {
	b.ReportAllocs()
	rpcs.Store(0)
	for b.Loop() {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- fetch()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(rpcs.Load())/float64(b.N), "rpcs/op")
}

func BenchmarkFetchModel(b *testing.B) {
	m := model(160, 1)
	var size int64
	byName := map[string]*codec.Tensor{}
	for _, t := range m {
		size += int64(len(t.Data))
		byName[t.Name] = t
	}
	b.Run("batched", func(b *testing.B) {
		h, err := New()
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Publish(1, m); err != nil {
			b.Fatal(err)
		}
		conn, rpcs := benchServer(b, nil, func(s *grpc.Server) { hubpb.RegisterHubServer(s, NewServer(h)) })
		c := hubpb.NewHubClient(conn)
		b.SetBytes(8 * size)
		eightClients(b, rpcs, func() error {
			n := 0
			_, err := Fetch(context.Background(), c, Request{Credit: 16}, func(*codec.Tensor) error { n++; return nil })
			if err == nil && n != len(m) {
				err = fmt.Errorf("%d tensors", n)
			}
			return err
		})
	})
	for _, comp := range []string{"", gzip.Name} {
		name := "per-tensor"
		if comp != "" {
			name += "-" + comp
		}
		b.Run(name, func(b *testing.B) {
			opts := []grpc.ServerOption{grpc.ForceServerCodec(grpctest.RawCodec{}),
				grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
					var req []byte
					if err := st.RecvMsg(&req); err != nil {
						return err
					}
					t, ok := byName[string(req)]
					if !ok {
						return fmt.Errorf("no tensor %q", req)
					}
					return st.SendMsg(&t.Data)
				})}
			conn, rpcs := benchServer(b, opts, func(*grpc.Server) {})
			callOpts := []grpc.CallOption{grpc.ForceCodec(grpctest.RawCodec{})}
			if comp != "" {
				callOpts = append(callOpts, grpc.UseCompressor(comp))
			}
			b.SetBytes(8 * size)
			eightClients(b, rpcs, func() error {
				for _, t := range m {
					req := []byte(t.Name)
					var data []byte
					if err := conn.Invoke(context.Background(), "/openfl.Aggregator/GetAggregatedTensor", &req, &data, callOpts...); err != nil {
						return err
					}
					if len(data) != len(t.Data) {
						return fmt.Errorf("%q: %d bytes", t.Name, len(data))
					}
				}
				return nil
			})
		})
	}
}
