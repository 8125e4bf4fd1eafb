package etcdgw

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/etcd/etcdtest"
	"github.com/podnet/podnet/ipam/store/storetest"
)

// TestTLS: the store suite over a member that serves clients over TLS and
// requires a client certificate; without one, the member refuses.
func TestTLS(t *testing.T) {
	ca, sc, sk, cc, ck := etcdtest.PKI(t, t.TempDir())
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
