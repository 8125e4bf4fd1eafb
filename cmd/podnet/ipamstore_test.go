package main

import (
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/podnet/podnet/ipam"
)

// TestIPAMKubeStoreClientGo: `podnet ipam --store kubernetes:KUBECONFIG`
// reaches the API through client-go's transport: the kubeconfig is read
// by clientcmd (its CA data trusted, its token sent), and a 401 is
// reported as a denial, not as "try again".
func TestIPAMKubeStoreClientGo(t *testing.T) {
	var auth string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`))
	}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	kc, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "c",
		"clusters": []any{map[string]any{"name": "c", "cluster": map[string]any{"server": srv.URL, "certificate-authority-data": ca}}},
		"users":    []any{map[string]any{"name": "u", "user": map[string]any{"token": "t0ken"}}},
		"contexts": []any{map[string]any{"name": "c", "context": map[string]any{"cluster": "c", "user": "u"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	o := &ipamOptions{}
	o.cfg.Store = "kubernetes:" + path
	st, err := o.openStore(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, _, err = ipam.New(st, ipam.Config{}).Pools(t.Context())
	if !errors.Is(err, ipam.ErrDenied) {
		t.Fatalf("Pools on an API that answers 401: %v, want ipam.ErrDenied", err)
	}
	if auth != "Bearer t0ken" {
		t.Errorf("Authorization %q, want the kubeconfig's token", auth)
	}
}
