package kube

import (
	"encoding/pem"
	"net/http"
	"testing"
)

// SetNetHTTP sets newNetHTTP, for kubehttp_test.go.
func SetNetHTTP(fn func(rt http.RoundTripper, host string) (Transport, error)) { newNetHTTP = fn }

// FakeAPIForTest serves a fake API server over HTTPS and HTTP/2 until
// the test ends, and returns its URL, its CA certificate in PEM and the
// bearer token it accepts.
func FakeAPIForTest(t *testing.T) (url string, caPEM []byte, token string) {
	f := newFakeAPIH2(t)
	return f.srv.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw}), f.token
}
