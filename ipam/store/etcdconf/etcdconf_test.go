package etcdconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCluster(t *testing.T) {
	if _, err := (Cluster{}).WithDefaults(); err == nil {
		t.Error("a cluster without endpoints was accepted")
	}
	c, err := Cluster{Endpoints: []string{"127.0.0.1:2379"}}.WithDefaults()
	if err != nil || c.DialTimeout != DefaultDialTimeout || c.TLS() {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	notPEM := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c    Cluster
		want string // in the error, which names the file at fault
	}{
		{Cluster{CertFile: "c.crt"}, `certFile "c.crt" and keyFile "" must be set together`},
		{Cluster{CertFile: "/nonexistent/c.crt", KeyFile: "/nonexistent/c.key"}, `client certificate "/nonexistent/c.crt"`},
		{Cluster{CAFile: "/nonexistent/ca.crt"}, "/nonexistent/ca.crt"},
		{Cluster{CAFile: notPEM}, notPEM + `" holds no PEM certificate`},
	} {
		if !tc.c.TLS() {
			t.Errorf("%+v: TLS() false", tc.c)
		}
		if _, err := tc.c.TLSConfig(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}
