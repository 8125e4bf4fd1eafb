package kube

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/ipamtest"
	"github.com/podnet/podnet/ipam/store/storetest"
)

// The store's suite and the allocator's, over an API server whose
// resourceVersions are not numbers.
func TestSuiteOpaqueResourceVersions(t *testing.T) {
	f := newFakeAPI(t)
	storetest.RunWrites(t, func(t *testing.T, prefix string) ipam.Store { return f.open(t, prefix) }, storetest.IPAMShape())
}

func TestAllocatorSuiteOpaqueResourceVersions(t *testing.T) {
	f := newFakeAPI(t)
	ipamtest.Run(t, func(t *testing.T) ipam.Store {
		return f.open(t, "/ipamtest/"+t.Name()+"/")
	}, ipamtest.Options{NoV1: true, Nodes: 4, PerNode: 5, DecodesPools: true})
}

// The allocator's suite through a net/http round tripper over HTTP/2,
// as the agent and the CLI reach the API server with client-go's.
func TestAllocatorSuiteNetHTTP2(t *testing.T) {
	f := newFakeAPIH2(t)
	ipamtest.Run(t, func(t *testing.T) ipam.Store {
		return f.openHTTP(t, "/ipamtest/"+t.Name()+"/", f.token)
	}, ipamtest.Options{NoV1: true, Nodes: 4, PerNode: 5, DecodesPools: true})
	if p := f.protos(); p["HTTP/2.0"] == 0 || len(p) != 1 {
		t.Errorf("requests by protocol: %v, want HTTP/2.0 only", p)
	}
}

var testPool = []byte(`{"name":"p","cidr":"10.9.0.0/16","blockSize":26}`)

// A resourceVersion is compared, never parsed: writes send back the
// string the server gave, a stale one conflicts, and the store goes on
// working (a non-numeric one once disabled it for good).
func TestOpaqueResourceVersion(t *testing.T) {
	f := newFakeAPI(t)
	s := f.open(t, "")
	ctx := t.Context()
	key := ipam.Keys{}.Pool("p")
	r1, err := s.Write(ctx, ipam.Write{Key: key, Value: testPool})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := s.Get(ctx, key)
	if err != nil || kv.ModRevision != r1 || r1 < opaqueBase {
		t.Fatalf("Get = %+v, %v; want revision %d, an opaque token", kv, err, r1)
	}
	r2, err := s.Write(ctx, ipam.Write{Key: key, ModRevision: r1, Value: testPool})
	if err != nil || r2 == r1 {
		t.Fatalf("update at %d: %d, %v", r1, r2, err)
	}
	var ae *APIError
	if _, err := s.Write(ctx, ipam.Write{Key: key, ModRevision: r1, Value: testPool}); !errors.Is(err, ipam.ErrConflict) || !errors.As(err, &ae) || ae.Code != 409 {
		t.Fatalf("update at the stale %d: %v, want the API's 409 as ErrConflict", r1, err)
	}
	if _, err := s.Write(ctx, ipam.Write{Key: key, ModRevision: r1, Delete: true}); !errors.Is(err, ipam.ErrConflict) {
		t.Fatalf("delete at the stale %d: %v, want ErrConflict", r1, err)
	}
	// A token handed out for another object is no revision of this one,
	// and is refused before anything is sent.
	other := ipam.Keys{}.Pool("q")
	n := len(f.sent())
	if _, err := s.Write(ctx, ipam.Write{Key: other, ModRevision: r2, Value: []byte(`{"name":"q","cidr":"10.8.0.0/16"}`)}); !errors.Is(err, ipam.ErrConflict) || len(f.sent()) != n {
		t.Fatalf("update of %s at %s's revision: %v, %d requests; want ErrConflict and none", other, key, err, len(f.sent())-n)
	}
	if _, err := s.Write(ctx, ipam.Write{Key: key, ModRevision: r2, Delete: true}); err != nil {
		t.Fatalf("delete at %d: %v", r2, err)
	}
	if _, err := s.Get(ctx, key); !errors.Is(err, ipam.ErrNotFound) {
		t.Fatalf("Get after the delete: %v", err)
	}
}

// 401 and 403 are what they are: access denied, which no retry fixes,
// with a message naming the status and what to check. Neither the store
// nor the allocator sends the request again.
func TestDenied(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { testDenied(t, tr.fake(t), tr.open, tr.creds) })
	}
}

func testDenied(t *testing.T, f *fakeAPI, open func(f *fakeAPI, t *testing.T, prefix, token string) *Store, creds string) {
	for _, tt := range []struct {
		name  string
		token string
		fault func(r *http.Request) *fakeAnswer
		want  []string
	}{
		{"401", "expired", nil, []string{"401", "does not accept the credentials of", creds, f.srv.URL}},
		{"403", "good", func(r *http.Request) *fakeAnswer { return &fakeAnswer{code: 403, reason: "Forbidden"} },
			[]string{"403 Forbidden", "not allowed to", "podnet.io", "check the RBAC rules", creds}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.setFault(tt.fault)
			defer f.setFault(nil)
			s := open(f, t, "", tt.token)
			ctx := t.Context()
			block := ipam.Keys{}.Block(netip.MustParsePrefix("10.9.0.0/26"))
			for op, call := range map[string]func() error{
				"Get":  func() error { _, err := s.Get(ctx, block); return err },
				"List": func() error { _, err := s.List(ctx, ipam.DefaultPrefix); return err },
				"Write": func() error {
					_, err := s.Write(ctx, ipam.Write{Key: ipam.Keys{}.Pool("p"), Value: testPool})
					return err
				},
				"Allocate": func() error {
					_, err := ipam.New(s, ipam.Config{}).AutoAssign(ctx, ipam.AutoAssignArgs{Handle: "net.c1", Node: "n1", Num4: 1})
					if k := ipam.KindOf(err); k != ipam.KindInvalid {
						t.Errorf("Allocate: kind %s, want %s", k, ipam.KindInvalid)
					}
					return err
				},
			} {
				n := len(f.sent())
				err := call()
				if !errors.Is(err, ipam.ErrDenied) || errors.Is(err, ipam.ErrUnavailable) {
					t.Errorf("%s: %v, want ErrDenied and not ErrUnavailable", op, err)
				}
				for _, w := range tt.want {
					if err != nil && !strings.Contains(err.Error(), w) {
						t.Errorf("%s: %q does not say %q", op, err, w)
					}
				}
				if sent := len(f.sent()) - n; sent != 1 {
					t.Errorf("%s: %d requests, want 1", op, sent)
				}
			}
		})
	}
}

// A 401 with a tokenFile reads the file again, once: a rotated token is
// taken up; a file that still holds a refused token is denied.
func TestTokenFileReread(t *testing.T) {
	f := newFakeAPI(t)
	kc := f.kubeconfig(t, "good", true)
	s := openAt(t, kc, "")
	ctx := t.Context()
	key := ipam.Keys{}.Pool("p")
	f.mu.Lock()
	f.token = "rotated"
	f.mu.Unlock()
	if err := os.WriteFile(filepath.Join(filepath.Dir(kc), "token"), []byte("rotated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, key); !errors.Is(err, ipam.ErrNotFound) || f.count("GET") != 2 {
		t.Fatalf("Get with a rotated token: %v after %d requests; want ErrNotFound after 2", err, f.count("GET"))
	}
	f.mu.Lock()
	f.token = "rotated again"
	f.mu.Unlock()
	if _, err := s.Get(ctx, key); !errors.Is(err, ipam.ErrDenied) || f.count("GET") != 4 {
		t.Fatalf("Get with a stale token file: %v after %d requests; want ErrDenied after 4", err, f.count("GET"))
	}
}

// A 409 is a conflict: the allocator reads the block again and writes
// at its new revision.
func TestConflictRetried(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			f := tr.fake(t)
			testConflictRetried(t, f, tr.open(f, t, "", f.token))
		})
	}
}

func testConflictRetried(t *testing.T, f *fakeAPI, s *Store) {
	ctx := t.Context()
	a := ipam.New(s, ipam.Config{})
	if err := a.PutPool(ctx, ipam.Pool{Name: "p", CIDR: netip.MustParsePrefix("10.9.0.0/16")}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AutoAssign(ctx, ipam.AutoAssignArgs{Handle: "net.c1", Node: "n1", Num4: 1}); err != nil {
		t.Fatal(err)
	}
	// Another writer updates the block just before the next write of it.
	touched := 0
	f.setFault(func(r *http.Request) *fakeAnswer {
		if object, ok := strings.CutPrefix(r.URL.Path, "/apis/podnet.io/v1/"); ok && r.Method == "PUT" && strings.HasPrefix(object, "ipamblocks/") && touched == 0 {
			touched++
			f.touchLocked(object)
		}
		return nil
	})
	puts := f.count("PUT ipamblocks/")
	got, err := a.AutoAssign(ctx, ipam.AutoAssignArgs{Handle: "net.c2", Node: "n1", Num4: 1})
	if err != nil || len(got.IPv4) != 1 {
		t.Fatalf("AutoAssign after a conflict: %+v, %v", got, err)
	}
	if touched != 1 || f.count("PUT ipamblocks/")-puts != 2 {
		t.Errorf("%d block writes, %d conflicts made; want 2 writes, the first in conflict", f.count("PUT ipamblocks/")-puts, touched)
	}
	ips, err := a.IPsByHandle(ctx, "n1", "net.c2")
	if err != nil || len(ips) != 1 || ips[0] != got.IPv4[0] {
		t.Errorf("IPsByHandle = %v, %v; want %v", ips, err, got.IPv4)
	}
}

// A 429 is waited out, as its Retry-After asks, when the caller's
// deadline leaves time; otherwise the call fails at once as unavailable,
// and no request leaves before the pause is over.
func TestTooManyRequests(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			f := tr.fake(t)
			testTooManyRequests(t, f, tr.open(f, t, "", f.token))
		})
	}
}

func testTooManyRequests(t *testing.T, f *fakeAPI, s *Store) {
	key := ipam.Keys{}.Pool("p")
	throttled, retryAfter := 0, ""
	f.setFault(func(r *http.Request) *fakeAnswer {
		if throttled > 0 {
			throttled--
			return &fakeAnswer{code: 429, reason: "TooManyRequests", header: map[string]string{"Retry-After": retryAfter}}
		}
		return nil
	})
	f.mu.Lock()
	throttled, retryAfter = 1, "1"
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := s.Get(ctx, key); !errors.Is(err, ipam.ErrNotFound) {
		t.Fatalf("Get after a 429: %v, want the answer to the resent request", err)
	}
	if d := time.Since(start); d < time.Second || f.count("GET") != 2 {
		t.Fatalf("Get answered after %v and %d requests, want 1 s and 2", d, f.count("GET"))
	}

	f.mu.Lock()
	throttled, retryAfter = 1, "3"
	f.mu.Unlock()
	short, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start = time.Now()
	_, err := s.Get(short, key)
	var ae *APIError
	if !errors.Is(err, ipam.ErrUnavailable) || !errors.As(err, &ae) || ae.Code != 429 {
		t.Fatalf("Get after a 429 with less time left than Retry-After: %v, want the 429 as ErrUnavailable", err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("Get waited %v for a pause of 3 s with 2 s left", d)
	}
	n := len(f.sent())
	if _, err := s.Get(short, key); !errors.Is(err, ipam.ErrUnavailable) || !strings.Contains(err.Error(), "429") || len(f.sent()) != n {
		t.Errorf("Get during the pause: %v, %d requests; want ErrUnavailable naming the 429, and none sent", err, len(f.sent())-n)
	}
}

// 5xx answers are unavailable, not sent again by the store, and retried
// by the allocator, which succeeds once the server recovers.
func TestServerErrors(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			f := tr.fake(t)
			testServerErrors(t, f, tr.open(f, t, "", f.token))
		})
	}
}

func testServerErrors(t *testing.T, f *fakeAPI, s *Store) {
	ctx := t.Context()
	for _, code := range []int{500, 502, 503, 504} {
		f.setFault(func(r *http.Request) *fakeAnswer { return &fakeAnswer{code: code, reason: "InternalError"} })
		n := len(f.sent())
		_, err := s.Get(ctx, ipam.Keys{}.Pool("p"))
		var ae *APIError
		if !errors.Is(err, ipam.ErrUnavailable) || !errors.As(err, &ae) || ae.Code != code || len(f.sent())-n != 1 {
			t.Errorf("%d: %v after %d requests, want ErrUnavailable after 1", code, err, len(f.sent())-n)
		}
	}
	failing := 3
	f.setFault(func(r *http.Request) *fakeAnswer {
		if failing > 0 {
			failing--
			return &fakeAnswer{code: 503, reason: "ServiceUnavailable"}
		}
		return nil
	})
	a := ipam.New(s, ipam.Config{})
	if err := a.PutPool(ctx, ipam.Pool{Name: "p", CIDR: netip.MustParsePrefix("10.9.0.0/16")}); err != nil {
		t.Fatalf("PutPool through three 503s: %v", err)
	}
	if _, err := a.AutoAssign(ctx, ipam.AutoAssignArgs{Handle: "net.c1", Node: "n1", Num4: 1}); err != nil {
		t.Fatal(err)
	}
}

// A Retry-After of 0 is no licence to resend at once: the store still
// pauses minPause between tries, until the caller's deadline.
func TestTooManyRequestsNoPause(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			f := tr.fake(t)
			testTooManyRequestsNoPause(t, f, tr.open(f, t, "", f.token))
		})
	}
}

func testTooManyRequestsNoPause(t *testing.T, f *fakeAPI, s *Store) {
	f.setFault(func(r *http.Request) *fakeAnswer {
		return &fakeAnswer{code: 429, reason: "TooManyRequests", header: map[string]string{"Retry-After": "0"}}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	if _, err := s.Get(ctx, ipam.Keys{}.Pool("p")); !errors.Is(err, ipam.ErrUnavailable) {
		t.Fatalf("Get while every answer is a 429: %v, want ErrUnavailable", err)
	}
	if n := f.count("GET"); n > int(500*time.Millisecond/minPause)+1 {
		t.Errorf("%d requests in 500 ms, want at most one per %v", n, minPause)
	}
}
