package storetest_test

import (
	"path/filepath"
	"testing"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/bolt"
	"github.com/podnet/podnet/ipam/store/storetest"
)

// TestRunWritesShapes runs RunWrites's both shapes against bbolt: the
// suite itself is right before it judges the Kubernetes store (test/k8s).
func TestRunWritesShapes(t *testing.T) {
	for name, shape := range map[string]storetest.Shape{"raw": storetest.RawShape(), "ipam": storetest.IPAMShape()} {
		t.Run(name, func(t *testing.T) {
			storetest.RunWrites(t, func(t *testing.T, _ string) ipam.Store {
				s, err := bolt.Open(t.Context(), bolt.Options{Path: filepath.Join(t.TempDir(), "ipam.db")})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}, shape)
		})
	}
}
