package testcert

import (
	"crypto/tls"
	"testing"
)

func TestWrite(t *testing.T) {
	f, err := Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2]string{{f.ServerCert, f.ServerKey}, {f.ClientCert, f.ClientKey}, {f.StrangerCert, f.StrangerKey}} {
		if _, err := tls.LoadX509KeyPair(p[0], p[1]); err != nil {
			t.Fatal(err)
		}
	}
}
