package kube

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
)

// selfSigned returns a certificate and key in PEM.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func write(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func TestKubeconfig(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t)
	write(t, dir, "ca.crt", cert)
	write(t, dir, "token", []byte("tok-from-file\n"))
	cfg := `{"apiVersion":"v1","kind":"Config","current-context":"c",
	  "contexts":[{"name":"other","context":{"cluster":"x","user":"y"}},{"name":"c","context":{"cluster":"k","user":"u"}}],
	  "clusters":[{"name":"k","cluster":{"server":"https://10.96.0.1:443","certificate-authority":"ca.crt"}}],
	  "users":[{"name":"u","user":{"tokenFile":"token"}}]}`
	c, err := loadKubeconfig(write(t, dir, "kc", []byte(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	if c.server.HostPort != "10.96.0.1:443" || !c.server.TLS || c.token != "tok-from-file" ||
		c.tokenFile != filepath.Join(dir, "token") || c.tls.RootCAs == nil || len(c.tls.Certificates) != 0 {
		t.Errorf("parsed %+v", c)
	}

	// Inline data, a client certificate, one context without current-context.
	cfg = `{"contexts":[{"name":"c","context":{"cluster":"k","user":"u"}}],
	  "clusters":[{"name":"k","cluster":{"server":"https://api:6443","certificate-authority-data":"` + b64(cert) + `","tls-server-name":"kubernetes"}}],
	  "users":[{"name":"u","user":{"client-certificate-data":"` + b64(cert) + `","client-key-data":"` + b64(key) + `","token":"t"}}]}`
	c, err = parseKubeconfig([]byte(cfg), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.tls.Certificates) != 1 || c.tls.ServerName != "kubernetes" || c.token != "t" || c.server.Host != "api" {
		t.Errorf("parsed %+v", c)
	}
}

func TestKubeconfigErrors(t *testing.T) {
	dir := t.TempDir()
	cluster := `"clusters":[{"name":"k","cluster":{"server":"https://api:6443"}}]`
	ctxs := `"contexts":[{"name":"c","context":{"cluster":"k","user":"u"}}]`
	for _, tt := range []struct{ cfg, want string }{
		{"apiVersion: v1\nkind: Config\n", "not JSON"},
		{`{` + ctxs + `,` + cluster + `,"users":[{"name":"u","user":{"exec":{"command":"x"}}}]}`, "exec"},
		{`{` + ctxs + `,` + cluster + `,"users":[{"name":"u","user":{"tokenFile":"missing"}}]}`, "tokenFile"},
		{`{` + ctxs + `,` + cluster + `,"users":[{"name":"u","user":{"client-certificate-data":"eA=="}}]}`, "client certificate"},
		{`{` + ctxs + `,"users":[{"name":"u","user":{}}]}`, `no cluster "k"`},
		{`{"current-context":"nope",` + ctxs + `,` + cluster + `}`, `"nope"`},
		{`{` + ctxs + `,"clusters":[{"name":"k","cluster":{"server":"ftp://x"}}],"users":[{"name":"u"}]}`, "scheme"},
		{`{` + ctxs + `,"clusters":[{"name":"k","cluster":{"server":"https://x","insecure-skip-tls-verify":true}}],"users":[{"name":"u"}]}`, "insecure"},
		{`{` + ctxs + `,"clusters":[{"name":"k","cluster":{"server":"https://x","certificate-authority-data":"eA=="}}],"users":[{"name":"u"}]}`, "no PEM"},
	} {
		_, err := parseKubeconfig([]byte(tt.cfg), dir)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want one saying %q", tt.cfg, err, tt.want)
		}
	}
	if _, err := Open(Options{Kubeconfig: filepath.Join(dir, "absent")}); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("missing file: %v", err)
	}
}

// A store that never reaches a server: what it refuses before sending.
func TestRefusedWithoutServer(t *testing.T) {
	dir := t.TempDir()
	kc := write(t, dir, "kc", []byte(`{"contexts":[{"name":"c","context":{"cluster":"k"}}],
	  "clusters":[{"name":"k","cluster":{"server":"https://192.0.2.1:6443"}}]}`))
	s, err := Open(Options{Kubeconfig: kc})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	p := ipam.DefaultPrefix
	if _, err := s.Get(ctx, p+"ipam/handles/h"); !errors.Is(err, ipam.ErrNotFound) {
		t.Errorf("read of a key the store cannot hold: %v, want ErrNotFound", err)
	}
	if _, err := s.Write(ctx, ipam.Write{Key: p + "ipam/handles/h", Value: []byte("{}")}); err == nil || !strings.Contains(err.Error(), "not a pool, block or node key") {
		t.Errorf("handle key: %v", err)
	}
	if _, err := s.Write(ctx, ipam.Write{Key: p + "ipam/blocks/10.0.0.0-26", Value: []byte(`{"cidr":"10.0.1.0/26"}`)}); err == nil || !strings.Contains(err.Error(), "does not match the key") {
		t.Errorf("block value of another key: %v", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Get(canceled, p+"ipam/pools/a"); !errors.Is(err, ipam.ErrUnavailable) {
		t.Errorf("Get with a canceled ctx: %v", err)
	}
	if _, err := s.Write(canceled, ipam.Write{Key: p + "ipam/pools/a", Value: []byte(`{"name":"a"}`)}); !errors.Is(err, ipam.ErrUnavailable) {
		t.Errorf("Write with a canceled ctx: %v", err)
	}
	// An object without a resourceVersion cannot be written back.
	if _, err := s.kv(ref{res: pools, name: "a"}, []byte(`{"metadata":{"name":"a"},"spec":{"name":"a"}}`)); err == nil || !strings.Contains(err.Error(), "no resourceVersion") {
		t.Errorf("object without a resourceVersion: %v", err)
	}
}

// A kubeconfig rendered by NewKubeconfig (the agent's, for its plugins)
// parses back to the same server, CA and credentials.
func TestKubeconfigRoundTrip(t *testing.T) {
	cert, key := selfSigned(t)
	for _, user := range []User{{Token: "tok"}, {TokenFile: "/var/run/secrets/token"}, {ClientCertData: cert, ClientKeyData: key}} {
		kc := NewKubeconfig("podnet", Cluster{Server: "https://10.96.0.1:443", CAData: cert, TLSServerName: "kubernetes"}, user)
		data, err := kc.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseKubeconfig(data)
		if err != nil {
			t.Fatal(err)
		}
		ci, ui, err := back.Current()
		if err != nil || ci.Server != "https://10.96.0.1:443" || string(ci.CAData) != string(cert) || ci.TLSServerName != "kubernetes" ||
			ui.Token != user.Token || ui.TokenFile != user.TokenFile || string(ui.ClientKeyData) != string(user.ClientKeyData) {
			t.Fatalf("round trip of %s: %+v %+v, %v", data, ci, ui, err)
		}
		if !strings.Contains(string(data), `"apiVersion": "v1"`) || !strings.Contains(string(data), `"preferences": {}`) {
			t.Errorf("rendered %s: not what kubectl writes", data)
		}
		if user.TokenFile != "" {
			continue // the file is not there to read
		}
		c, err := parseKubeconfig(data, "")
		if err != nil || c.server.Base != "https://10.96.0.1:443" || c.tls.RootCAs == nil || c.token != user.Token || len(c.tls.Certificates) != map[bool]int{true: 1, false: 0}[len(user.ClientCertData) > 0] {
			t.Fatalf("store's parse of %s: %+v, %v", data, c, err)
		}
	}
}
