// Package testcert writes a certificate authority and certificates signed
// by it for tests of TLS and mutual TLS: a server's for 127.0.0.1, ::1
// and localhost, a client's, and a client's from another authority that
// servers must refuse. Keys are ECDSA P-256, valid for a day.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// Files are the PEM files Write made.
type Files struct {
	CA                        string // the authority's certificate
	ServerCert, ServerKey     string
	ClientCert, ClientKey     string
	StrangerCert, StrangerKey string // a client signed by another authority
}

// Write makes the certificates in dir.
func Write(dir string) (Files, error) {
	f := Files{
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
		StrangerCert: filepath.Join(dir, "stranger.pem"), StrangerKey: filepath.Join(dir, "stranger-key.pem"),
	}
	ca, caKey, err := authority("tensorpress test CA")
	if err != nil {
		return f, err
	}
	if err := writePEM(f.CA, "CERTIFICATE", ca.Raw); err != nil {
		return f, err
	}
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := leaf(server, ca, caKey, f.ServerCert, f.ServerKey); err != nil {
		return f, err
	}
	client := &x509.Certificate{Subject: pkix.Name{CommonName: "client"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if err := leaf(client, ca, caKey, f.ClientCert, f.ClientKey); err != nil {
		return f, err
	}
	other, otherKey, err := authority("another CA")
	if err != nil {
		return f, err
	}
	stranger := &x509.Certificate{Subject: pkix.Name{CommonName: "stranger"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	return f, leaf(stranger, other, otherKey, f.StrangerCert, f.StrangerKey)
}

var serial atomic.Int64

func template(t *x509.Certificate) *x509.Certificate {
	t.SerialNumber = big.NewInt(serial.Add(1))
	t.NotBefore = time.Now().Add(-time.Hour)
	t.NotAfter = time.Now().Add(24 * time.Hour)
	return t
}

func authority(name string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	t := template(&x509.Certificate{
		Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	})
	der, err := x509.CreateCertificate(rand.Reader, t, t, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}

func leaf(t, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	t = template(t)
	t.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, t, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(keyFile, "PRIVATE KEY", kb)
}

func writePEM(file, typ string, der []byte) error {
	return os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
