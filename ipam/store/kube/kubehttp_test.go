package kube_test

import (
	"errors"
	"net/http"
	"net/netip"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/kube"
	"github.com/podnet/podnet/ipam/store/kube/kubehttp"
)

// The store's tests run over net/http too, through kubehttp, which they
// cannot import themselves (kubehttp imports kube).
func init() {
	kube.SetNetHTTP(func(rt http.RoundTripper, host string) (kube.Transport, error) { return kubehttp.New(rt, host) })
}

// openKubeStore opens the store as the agent and the CLI do
// (kubehttp.Open): client-go's round tripper (its TLS, its credentials,
// HTTP/2) under the store.
func openKubeStore(cfg *rest.Config, prefix string) (*kube.Store, error) {
	return kubehttp.Open(cfg, nil, kube.Options{Kubeconfig: "the agent's API config", Prefix: prefix})
}

// TestClientGoTransport: the store over client-go's transport, built
// from a rest.Config as the agent's is: allocations work, and credentials
// the server refuses are ipam.ErrDenied, named as the caller named them.
func TestClientGoTransport(t *testing.T) {
	url, ca, token := kube.FakeAPIForTest(t)
	for _, tt := range []struct {
		token  string
		denied bool
	}{{token, false}, {"expired", true}} {
		cfg := &rest.Config{Host: url, BearerToken: tt.token, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
		s, err := openKubeStore(cfg, "")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		a := ipam.New(s, ipam.Config{})
		err = a.PutPool(t.Context(), ipam.Pool{Name: "p", CIDR: netip.MustParsePrefix("10.9.0.0/16")})
		if tt.denied {
			if !errors.Is(err, ipam.ErrDenied) || ipam.KindOf(err) != ipam.KindInvalid {
				t.Fatalf("PutPool with a refused token: %v, want ErrDenied", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got, err := a.AutoAssign(t.Context(), ipam.AutoAssignArgs{Handle: "net.c1", Node: "n1", Num4: 1})
		if err != nil || len(got.IPv4) != 1 {
			t.Fatalf("AutoAssign: %+v, %v", got, err)
		}
		if held, err := a.IPsByHandle(t.Context(), "n1", "net.c1"); err != nil || len(held) != 1 || held[0] != got.IPv4[0] {
			t.Fatalf("IPsByHandle = %v, %v; want %v", held, err, got.IPv4)
		}
	}
}
