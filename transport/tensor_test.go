package transport

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// TestReadKinds mixes bytes and tensors: each reader method meets the
// other kind with its error and does not consume it.
func TestReadKinds(t *testing.T) {
	a, b := net.Pipe()
	ca, cb := pair(t, a, b)
	x := &codec.Tensor{Name: "x", DType: codec.U8, Shape: []int64{3}, Data: []byte{1, 2, 3}}
	errc := make(chan error, 1)
	go func() {
		_, err := ca.Write([]byte("hi"))
		if err == nil {
			err = ca.WriteTensor(x)
		}
		if err == nil {
			_, err = ca.Write([]byte("bye"))
		}
		if err == nil {
			err = ca.CloseWrite()
		}
		errc <- err
	}()
	if _, err := cb.ReadTensor(); !errors.Is(err, ErrBytesNext) {
		t.Fatalf("ReadTensor before bytes: %v", err)
	}
	buf := make([]byte, 10)
	if n, err := cb.Read(buf); err != nil || string(buf[:n]) != "hi" {
		t.Fatalf("Read: %q, %v", buf[:n], err)
	}
	if _, err := cb.Read(buf); !errors.Is(err, ErrTensorNext) {
		t.Fatalf("Read before a tensor: %v", err)
	}
	if got, err := cb.ReadTensor(); err != nil || !bytes.Equal(got.Data, x.Data) {
		t.Fatalf("ReadTensor: %v, %v", got, err)
	}
	rest, err := io.ReadAll(cb)
	if err != nil || string(rest) != "bye" {
		t.Fatalf("rest %q, %v", rest, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	ca.Close()
	cb.Close()
}
