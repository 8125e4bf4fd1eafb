package etcdgw

import (
	"context"
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
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/etcd/etcdtest"
	"github.com/podnet/podnet/ipam/store/storetest"
)

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, each signed by the CA, into dir.
func testPKI(t *testing.T, dir string) (ca, serverCert, serverKey, clientCert, clientKey string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "podnet test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(name string, serial int64, usage ...x509.ExtKeyUsage) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", kder)
	}
	ca = write("ca.crt", "CERTIFICATE", caDER)
	// Also a client certificate: etcd's gateway dials its own gRPC
	// server with it.
	serverCert, serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	clientCert, clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return
}

// TestTLS: the store suite over a member that serves clients over TLS and
// requires a client certificate; without one, the member refuses.
func TestTLS(t *testing.T) {
	ca, sc, sk, cc, ck := testPKI(t, t.TempDir())
	c := etcdtest.Start(t, 1, etcdtest.WithClientTLS(sc, sk, ca))
	eps := c.Endpoints()
	if !strings.HasPrefix(eps[0], "https://") {
		t.Fatalf("endpoints %v", eps)
	}
	storetest.Run(t, func(t *testing.T) ipam.Store {
		s, err := New(Options{Endpoints: eps, CertFile: cc, KeyFile: ck, CAFile: ca, DialTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})

	noCert, err := New(Options{Endpoints: eps, CAFile: ca, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer noCert.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := noCert.Get(ctx, "/x"); err == nil {
		t.Error("a client without a certificate was served")
	}
}
