package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/auth"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/internal/testcert"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// hubModels writes version 1 of model(1) into a new models directory.
func hubModels(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "1", "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := tensorfile.WriteSafetensors(f, model(1), nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

// versionsWith calls Versions on addr, dialed with c.
func versionsWith(t *testing.T, addr string, c auth.Config) error {
	t.Helper()
	opts, err := c.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = hubpb.NewHubClient(conn).Versions(context.Background(), &hubpb.VersionsRequest{})
	return err
}

// TestHubOpenListener: a hub whose --listen or --metrics is off loopback
// with no client certificates and no token refuses to start, saying why
// and naming --insecure (TLS without client certificates does not count).
func TestHubOpenListener(t *testing.T) {
	certs, err := testcert.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	models := hubModels(t)
	for name, args := range map[string][]string{
		"listen":         {"--listen", ":0"},
		"listen all":     {"--listen", "0.0.0.0:0"},
		"TLS, no client": {"--listen", ":0", "--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey},
		"metrics":        {"--listen", "127.0.0.1:0", "--metrics", ":0"},
	} {
		t.Run(name, func(t *testing.T) {
			var errb bytes.Buffer
			code := run(append([]string{"hub", "--dir", models}, args...), io.Discard, &errb)
			if code != 1 || !strings.Contains(errb.String(), "refusing to listen off loopback") || !strings.Contains(errb.String(), "--insecure") {
				t.Fatalf("exit %d, want 1 saying why and naming --insecure:\n%s", code, errb.String())
			}
		})
	}
	var errb bytes.Buffer
	if code := run([]string{"hub", "--dir", models, "--tls-ca", certs.CA}, io.Discard, &errb); code != 2 || !strings.Contains(errb.String(), "--tls-ca needs --tls-cert") {
		t.Fatalf("--tls-ca alone: exit %d: %s", code, errb.String())
	}
}

// TestHubMutualTLS: with --tls-ca, a client without a certificate, or
// with one from another authority, is refused; one with a certificate
// the CA signed is served, and so is a scrape of /metrics with it.
func TestHubMutualTLS(t *testing.T) {
	certs, err := testcert.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := startHub(t, "--dir", hubModels(t), "--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey, "--tls-ca", certs.CA,
		"--metrics", "127.0.0.1:0")
	defer stop()
	for name, c := range map[string]auth.Config{
		"no certificate": {CAFile: certs.CA},
		"a stranger":     {CAFile: certs.CA, CertFile: certs.StrangerCert, KeyFile: certs.StrangerKey},
	} {
		if err := versionsWith(t, addr, c); status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want Unavailable (the handshake refused)", name, err)
		}
	}
	client := auth.Config{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}
	if err := versionsWith(t, addr, client); err != nil {
		t.Fatalf("a client with its certificate: %v", err)
	}
	tc, err := client.ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "tensorpress_hub_versions 1") {
		t.Errorf("/metrics over mutual TLS: %s %.200s", resp.Status, b)
	}
	bare := tc.Clone()
	bare.Certificates = nil
	hc2 := &http.Client{Transport: &http.Transport{TLSClientConfig: bare}}
	defer hc2.CloseIdleConnections()
	if resp, err := hc2.Get("https://" + metricsAddr + "/healthz"); err == nil {
		resp.Body.Close()
		t.Error("/healthz served to a client without a certificate")
	}
}

// TestHubToken: with --token-file, a call without the token, or with
// another, ends Unauthenticated; one with it is served; /metrics wants it
// as a bearer token.
func TestHubToken(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	other := filepath.Join(dir, "other")
	os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	os.WriteFile(other, []byte("fedcba9876543210fedcba9876543210\n"), 0o600)
	addr, stop := startHub(t, "--dir", hubModels(t), "--token-file", tok, "--metrics", "127.0.0.1:0")
	defer stop()
	for name, c := range map[string]auth.Config{"no token": {}, "another token": {TokenFile: other}} {
		if err := versionsWith(t, addr, c); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: %v, want Unauthenticated", name, err)
		}
	}
	if err := versionsWith(t, addr, auth.Config{TokenFile: tok}); err != nil {
		t.Fatalf("with the token: %v", err)
	}
	for bearer, want := range map[string]int{"": http.StatusUnauthorized, "fedcba9876543210fedcba9876543210": http.StatusUnauthorized,
		"0123456789abcdef0123456789abcdef": http.StatusOK} {
		req, _ := http.NewRequest("GET", "http://"+metricsAddr+"/metrics", nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("/metrics with bearer %q: %s, want %d", bearer, resp.Status, want)
		}
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestHubLimitFlags: limits that cannot work are refused before the hub
// starts.
func TestHubLimitFlags(t *testing.T) {
	models := hubModels(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--memory", "0"}, "--memory 0"},
		{[]string{"--max-streams", "0"}, "--max-streams 0"},
		{[]string{"--max-message", "512"}, "largest message 512 bytes"},
		{[]string{"--handshake-timeout", "0s"}, "handshake timeout 0s"},
		{[]string{"--idle-timeout", "-1s"}, "idle timeout -1s"},
		{[]string{"--max-conns-per-peer", "0"}, "0 per peer"},
		{[]string{"--max-slow-decoded", "0"}, "--max-slow-decoded 0"},
	} {
		var errb bytes.Buffer
		code := run(append([]string{"hub", "--dir", models}, c.args...), io.Discard, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, want 2 saying %q: %s", c.args, code, c.want, errb.String())
		}
	}
}
