package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/tensorpress/tensorpress/auth"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/internal/testcert"
)

// runFetch runs fetch in this process and returns its exit status and
// output.
func runFetch(args ...string) (int, string) {
	var out bytes.Buffer
	code := run(append([]string{"fetch", "--progress", "0", "--stall", "20s"}, args...), &out, &out)
	return code, out.String()
}

// TestFetchNotAHub points fetch at an HTTP/1 server, at a gRPC server
// without the Hub service, and at a port where nothing listens with
// --stall short: each a clear error.
func TestFetchNotAHub(t *testing.T) {
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello")) }))
	defer web.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	go s.Serve(ln)
	defer s.Stop()
	gone, _ := net.Listen("tcp", "127.0.0.1:0")
	goneAddr := gone.Addr().String()
	gone.Close()
	out := filepath.Join(t.TempDir(), "m.safetensors")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--hub", web.Listener.Addr().String()}, "is not a tensorpress hub: it does not speak HTTP/2"},
		{[]string{"--hub", "http://" + web.Listener.Addr().String()}, "is not a tensorpress hub"},
		{[]string{"--hub", ln.Addr().String()}, "is not a tensorpress hub: a gRPC server without the Hub service"},
		{[]string{"--hub", goneAddr, "--stall", "300ms"}, "connection refused"},
		{[]string{"--hub", "grpc://x:1"}, "scheme grpc://"},
		{[]string{"--hub", "http://x:1", "--tls-ca", "ca.pem"}, "plain text (http://)"},
	} {
		code, text := runFetch(append(c.args, "--out", out)...)
		if code == 0 || !strings.Contains(text, c.want) {
			t.Errorf("%v: exit %d, %q; want %q", c.args, code, text, c.want)
		}
	}
	if fileExists(out) {
		t.Error("a failed fetch left its file")
	}
}

// TestFetchOutMustSayDirectory: an --out that is neither .safetensors nor
// a directory is refused, and -h shows fetch's own config example.
func TestFetchOutMustSayDirectory(t *testing.T) {
	dir := t.TempDir()
	code, text := runFetch("--hub", "x:1", "--out", filepath.Join(dir, "model"))
	if code != 2 || !strings.Contains(text, "a path ending in / or --npy") || fileExists(filepath.Join(dir, "model")) {
		t.Errorf("exit %d: %q", code, text)
	}
	code, text = runFetch("-h")
	if code != 0 || !strings.Contains(text, "# tensorpress fetch --config fetch.yaml") || strings.Contains(text, "dir: /srv/models") {
		t.Errorf("fetch -h: exit %d: %q", code, text)
	}
}

// TestFetchAuth serves a hub with mutual TLS and a token, and fetches
// from it: with the CA, the client certificate and the token it works;
// without the certificate, without the token, or without TLS it is
// refused with a clear error.
func TestFetchAuth(t *testing.T) {
	dir := t.TempDir()
	cf, err := testcert.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	wrongTok := filepath.Join(dir, "wrong-token")
	os.WriteFile(wrongTok, []byte("fedcba9876543210fedcba9876543210\n"), 0o600)
	cfg := auth.Config{CertFile: cf.ServerCert, KeyFile: cf.ServerKey, CAFile: cf.CA, TokenFile: tok}
	opts, err := cfg.ServerOptions()
	if err != nil {
		t.Fatal(err)
	}
	h, _ := hub.New()
	m := model(4)
	if err := h.Publish(1, m); err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	hubpb.RegisterHubServer(s, hub.NewServer(h))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Stop()
	addr := ln.Addr().String()
	out := filepath.Join(dir, "m.safetensors")
	good := []string{"--hub", addr, "--out", out, "--tls-ca", cf.CA, "--tls-cert", cf.ClientCert, "--tls-key", cf.ClientKey, "--token-file", tok}
	if code, text := runFetch(good...); code != 0 {
		t.Fatalf("exit %d: %s", code, text)
	}
	if err := checkST(out, digestsOf(m)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		// The hub refuses the certificate (or its absence) in the handshake,
		// or, with TLS 1.3, by closing the connection after it.
		{[]string{"--hub", addr, "--tls-ca", cf.CA, "--token-file", tok}, "certificate"},
		{[]string{"--hub", addr, "--tls-ca", cf.CA, "--tls-cert", cf.StrangerCert, "--tls-key", cf.StrangerKey, "--token-file", tok}, "certificate"},
		{[]string{"--hub", addr, "--tls-ca", cf.CA, "--tls-cert", cf.ClientCert, "--tls-key", cf.ClientKey}, "refused this client"},
		{[]string{"--hub", addr, "--tls-ca", cf.CA, "--tls-cert", cf.ClientCert, "--tls-key", cf.ClientKey, "--token-file", wrongTok}, "refused this client"},
		{[]string{"--hub", addr, "--token-file", tok}, "a hub with TLS?"},
	} {
		code, text := runFetch(append(c.args, "--out", filepath.Join(dir, "x.safetensors"), "--stall", "2s")...)
		if code == 0 || !strings.Contains(text, c.want) {
			t.Errorf("%v: exit %d, %q; want %q", c.args, code, text, c.want)
		}
	}
}

func digestsOf(ts []*codec.Tensor) digests {
	ds := digests{}
	for _, x := range ts {
		ds[x.Name] = sha256.Sum256(x.Data)
	}
	return ds
}

// TestFetchStaleState: a record left beside a finished file (a run killed
// between the rename and the record's removal) does not make the next run
// write a file without data: it fetches anew.
func TestFetchStaleState(t *testing.T) {
	h, _ := hub.New()
	m := model(5)
	if err := h.Publish(1, m); err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	hubpb.RegisterHubServer(s, hub.NewServer(h))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Stop()
	out := filepath.Join(t.TempDir(), "m.safetensors")
	st := outState{Version: 1, Lossless: true, Done: true, Reserve: headerRoom(len(m)), Digests: map[string]string{}}
	var at int64
	for _, x := range m {
		st.Tensors = append(st.Tensors, outTensor{Name: x.Name, DType: x.DType, Shape: x.Shape, Begin: at})
		at += int64(len(x.Data))
		st.Digests[x.Name] = fmt.Sprintf("%x", sha256.Sum256(x.Data))
	}
	b, _ := json.Marshal(st)
	for range 2 {
		if err := os.WriteFile(out+".part.json", b, 0o644); err != nil {
			t.Fatal(err)
		}
		if code, text := runFetch("--hub", ln.Addr().String(), "--out", out); code != 0 {
			t.Fatalf("exit %d: %s", code, text)
		}
		if err := checkST(out, digestsOf(m)); err != nil {
			t.Fatal(err)
		}
	}
}
