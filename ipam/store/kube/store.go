package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/podnet/podnet/internal/minihttp"
	"github.com/podnet/podnet/ipam"
)

// SpecPrefix starts a store spec naming a kubeconfig in JSON:
// "kubernetes:admin.json" (the CLI; the agent opens its store with its
// own credentials, and the plugins use the agent's socket).
const SpecPrefix = "kubernetes:"

// ParseSpec returns the kubeconfig path of a "kubernetes:PATH" store spec.
func ParseSpec(spec string) (string, bool) {
	path, ok := strings.CutPrefix(spec, SpecPrefix)
	return path, ok && path != ""
}

// DefaultDialTimeout bounds a connection to the API server.
const DefaultDialTimeout = time.Second

// listPage is how many objects one LIST request asks for.
const listPage = 500

// Options configure a Store.
type Options struct {
	// Kubeconfig is the path of a kubeconfig file in JSON: server,
	// certificate-authority(-data), and token, tokenFile or a client
	// certificate and key (files or data).
	Kubeconfig string
	// KubeconfigJSON, when set, is the kubeconfig itself (Kubeconfig is
	// then only its name in messages, and relative paths in it are
	// relative to the working directory), as Kubeconfig.Marshal renders
	// one. (The agent, which has client-go, passes Transport instead.)
	KubeconfigJSON []byte
	// Prefix is the allocator's key prefix; "" means ipam.DefaultPrefix.
	// Another prefix is a set of its own (see the package doc).
	Prefix string
	// DialTimeout defaults to DefaultDialTimeout.
	DialTimeout time.Duration
	// Dial, when set, opens TCP connections (tests reach an API server
	// in a network namespace this way).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxIdleConns is how many idle connections to the API server are
	// kept; 0 means minihttp's default, sized for a plugin's one verb. A
	// process that sends requests concurrently for a long time (the
	// agent, for every plugin of its node) keeps more.
	MaxIdleConns int
	// Transport, when set, carries every request instead: no kubeconfig
	// is read (Kubeconfig, when set, only names the credentials in
	// messages), and DialTimeout, Dial and MaxIdleConns do not apply.
	// The agent and the CLI pass client-go's (ipam/store/kube/kubehttp
	// makes one of an http.RoundTripper): HTTP/2, and every credential
	// client-go knows. Plugins keep the default, minihttp.
	Transport Transport
}

// Transport carries the store's requests to the API server and
// authenticates them. It must not resend a request that may have reached
// the server (see the package doc); the store resends what the server
// refused unrun (a 429), and maps the status codes.
type Transport interface {
	// Do sends req and returns the answer, its body read to the end, or
	// an error when there is no answer (the store reports it as
	// ipam.ErrUnavailable).
	Do(ctx context.Context, req Request) (Response, error)
	// Server names the API server in messages.
	Server() string
}

// Request is one request of the store.
type Request struct {
	Method string
	// Path is absolute, with its query: /apis/podnet.io/v1/ipamblocks?...
	Path string
	// Body is JSON, or nil.
	Body []byte
}

// Response is the API server's answer.
type Response struct {
	Status int
	// RetryAfter is the Retry-After header's value, if any.
	RetryAfter string
	Body       []byte
}

// Store is an ipam.Store over the Kubernetes API.
type Store struct {
	t     Transport
	creds string // whose credentials, for messages: "kubeconfig PATH"
	names names
	revs  revisions
	// notBefore (unix ns) is when the API server's last 429 allows the
	// next request.
	notBefore atomic.Int64
}

var _ ipam.Store = (*Store)(nil)

// Open reads the kubeconfig (unless o.Transport is set) and returns a
// Store; it does not connect until the first request.
func Open(o Options) (*Store, error) {
	if o.Transport != nil {
		creds := o.Kubeconfig
		if creds == "" {
			creds = "the transport's credentials"
		}
		return &Store{t: o.Transport, creds: creds, names: newNames(o.Prefix)}, nil
	}
	if o.KubeconfigJSON != nil {
		c, err := parseKubeconfig(o.KubeconfigJSON, "")
		if err != nil {
			return nil, fmt.Errorf("kubernetes store: kubeconfig %s: %w", o.Kubeconfig, err)
		}
		return newStore(c, o), nil
	}
	if o.Kubeconfig == "" {
		return nil, errors.New("kubernetes store: no kubeconfig")
	}
	c, err := loadKubeconfig(o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	return newStore(c, o), nil
}

func newStore(c *conn, o Options) *Store {
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	t := &miniTransport{conn: c,
		client: &minihttp.Client{DialTimeout: o.DialTimeout, TLSConfig: c.tls, Dial: o.Dial, MaxIdle: o.MaxIdleConns}}
	return &Store{t: t, creds: "kubeconfig " + o.Kubeconfig, names: newNames(o.Prefix)}
}

// Close implements ipam.Store. A Transport given in Options is the
// caller's, and stays open.
func (s *Store) Close() error {
	if t, ok := s.t.(*miniTransport); ok {
		t.client.CloseIdle()
	}
	return nil
}

// Get implements ipam.Store with a consistent read (a GET without a
// resourceVersion: the latest, from etcd or a watch cache known to be
// current). A key that is no pool,
// block or node key cannot exist in this store, so reading it finds
// nothing (the allocator looks for a layout marker and v1 data that only
// older stores can hold); writing it is refused.
func (s *Store) Get(ctx context.Context, key string) (ipam.KV, error) {
	r, err := s.names.ref(key)
	if err != nil {
		return ipam.KV{}, fmt.Errorf("%w: %v", ipam.ErrNotFound, err)
	}
	return s.get(ctx, r)
}

func (s *Store) get(ctx context.Context, r ref) (ipam.KV, error) {
	c := call{method: "GET", path: r.res.plural + "/" + r.name}
	code, body, err := s.do(ctx, c)
	switch {
	case err != nil:
		return ipam.KV{}, err
	case code != 200:
		return ipam.KV{}, s.errorFor(ctx, apiError(c.op(), code, body))
	}
	return s.kv(r, body)
}

// List implements ipam.Store: a paginated LIST of each resource whose
// keys can start with prefix, filtered by key.
func (s *Store) List(ctx context.Context, prefix string) ([]ipam.KV, error) {
	var out []ipam.KV
	for _, res := range resources {
		seg := s.names.prefix + res.segment
		if !strings.HasPrefix(seg, prefix) && !strings.HasPrefix(prefix, seg) {
			continue
		}
		kvs, err := s.list(ctx, res)
		if err != nil {
			return nil, err
		}
		for _, kv := range kvs {
			if strings.HasPrefix(kv.Key, prefix) {
				out = append(out, kv)
			}
		}
	}
	// Object names do not sort as keys do (':' and '-' swap places).
	slices.SortFunc(out, func(a, b ipam.KV) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// listAnswer is a page of a LIST.
type listAnswer struct {
	Metadata struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
	Items []object `json:"items"`
}

func (s *Store) list(ctx context.Context, res *resource) ([]ipam.KV, error) {
	var out []ipam.KV
	q := url.Values{"labelSelector": {s.names.selector()}, "limit": {strconv.Itoa(listPage)}}
	if res == pools && !ipam.IsFreshRead(ctx) {
		// Every allocation lists the pools; a consistent LIST waits for
		// the API server's watch cache to catch up with etcd (~90 ms
		// right after a write), one at resourceVersion 0 is served from
		// the cache as it is (~1 ms). A pool list a moment old can pick
		// a pool that was just disabled, never an address that is taken:
		// addresses are decided by the block's compare-and-swap. A
		// handful of pools needs no pages (and a cache read has none).
		q = url.Values{"labelSelector": {s.names.selector()}, "resourceVersion": {"0"}}
	}
	for {
		c := call{method: "GET", path: res.plural + "?" + q.Encode()}
		code, body, err := s.do(ctx, c)
		if err != nil {
			return nil, err
		}
		if code != 200 {
			return nil, s.errorFor(ctx, apiError(c.op(), code, body))
		}
		var page listAnswer
		if err := json.Unmarshal(body, &page); err != nil {
			return nil, fmt.Errorf("kubernetes store: %s: undecodable answer: %v", c.op(), err)
		}
		for _, o := range page.Items {
			kv, err := s.toKV(res, o)
			if err != nil {
				return nil, err
			}
			out = append(out, kv)
		}
		if page.Metadata.Continue == "" {
			return out, nil
		}
		q.Set("continue", page.Metadata.Continue)
	}
}
