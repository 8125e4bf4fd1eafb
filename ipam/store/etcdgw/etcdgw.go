package etcdgw

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/podnet/podnet/internal/minihttp"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/etcdconf"
)

// Options configure a Store: the cluster, as for the full client's store
// (ipam/store/etcd).
type Options = etcdconf.Cluster

// Store is an ipam.Store over the v3 gateway.
type Store struct {
	endpoints []minihttp.Endpoint
	client    *minihttp.Client
	current   atomic.Int32 // index of the endpoint that last answered
	user      string
	password  string

	tokenMu sync.Mutex
	token   string
}

var _ ipam.Store = (*Store)(nil)

// New returns a Store; it does not connect until the first request.
func New(opts Options) (*Store, error) {
	opts, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	client := &minihttp.Client{DialTimeout: opts.DialTimeout}
	scheme := "http://"
	if opts.TLS() {
		tc, err := opts.TLSConfig()
		if err != nil {
			return nil, err
		}
		client.TLSConfig = tc
		scheme = "https://"
	}
	s := &Store{client: client, user: opts.Username, password: opts.Password}
	for _, raw := range opts.Endpoints {
		raw = strings.TrimRight(strings.TrimSpace(raw), "/")
		if raw == "" {
			continue
		}
		if !strings.Contains(raw, "://") {
			raw = scheme + raw
		}
		ep, err := parseEndpoint(raw)
		if err != nil {
			return nil, err
		}
		if ep.TLS && client.TLSConfig == nil {
			client.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		s.endpoints = append(s.endpoints, ep)
	}
	if len(s.endpoints) == 0 {
		return nil, errors.New("etcd store: no endpoints")
	}
	return s, nil
}

// Close implements ipam.Store.
func (s *Store) Close() error {
	s.client.CloseIdle()
	return nil
}

// int64s decodes the gateway's int64 fields, which proto3's JSON mapping
// writes as strings.
type int64s int64

func (v *int64s) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*v = 0
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	*v = int64s(n)
	return err
}

type header struct {
	Revision int64s `json:"revision"`
}

type kvJSON struct {
	Key         []byte `json:"key"`
	Value       []byte `json:"value"`
	ModRevision int64s `json:"mod_revision"`
}

func (kv kvJSON) toKV() ipam.KV {
	return ipam.KV{Key: string(kv.Key), Value: kv.Value, ModRevision: int64(kv.ModRevision)}
}

type rangeResp struct {
	Header header   `json:"header"`
	Kvs    []kvJSON `json:"kvs"`
}

// Get implements ipam.Store.
func (s *Store) Get(ctx context.Context, key string) (ipam.KV, error) {
	var r rangeResp
	if err := s.call(ctx, "/v3/kv/range", map[string]any{"key": []byte(key)}, &r); err != nil {
		return ipam.KV{}, fmt.Errorf("etcd get %s: %w", key, err)
	}
	if len(r.Kvs) == 0 {
		return ipam.KV{}, fmt.Errorf("%s: %w", key, ipam.ErrNotFound)
	}
	return r.Kvs[0].toKV(), nil
}

// List implements ipam.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]ipam.KV, error) {
	kvs, _, err := s.ListRev(ctx, prefix)
	return kvs, err
}

// ListRev implements ipam.Watcher.
func (s *Store) ListRev(ctx context.Context, prefix string) ([]ipam.KV, int64, error) {
	var r rangeResp
	req := map[string]any{"key": []byte(prefix), "range_end": prefixEnd(prefix)}
	if err := s.call(ctx, "/v3/kv/range", req, &r); err != nil {
		return nil, 0, fmt.Errorf("etcd list %s: %w", prefix, err)
	}
	out := make([]ipam.KV, len(r.Kvs))
	for i, kv := range r.Kvs {
		out[i] = kv.toKV()
	}
	return out, int64(r.Header.Revision), nil
}

// prefixEnd is the first key after every key with the prefix, etcd's
// range end for a prefix ("\x00" for the empty prefix: everything).
func prefixEnd(prefix string) []byte {
	end := []byte(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

// Write implements ipam.Store: one etcd txn comparing the key's
// ModRevision (0 holds exactly when the key does not exist), none for
// AnyRevision.
func (s *Store) Write(ctx context.Context, w ipam.Write) (int64, error) {
	var compare []map[string]any
	if w.ModRevision != ipam.AnyRevision {
		compare = []map[string]any{{"key": []byte(w.Key), "target": "MOD", "result": "EQUAL", "mod_revision": strconv.FormatInt(w.ModRevision, 10)}}
	}
	op := map[string]any{"request_put": map[string]any{"key": []byte(w.Key), "value": w.Value}}
	if w.Delete {
		op = map[string]any{"request_delete_range": map[string]any{"key": []byte(w.Key)}}
	}
	var r struct {
		Header    header `json:"header"`
		Succeeded bool   `json:"succeeded"` // omitted when false
	}
	if err := s.call(ctx, "/v3/kv/txn", map[string]any{"compare": compare, "success": []map[string]any{op}}, &r); err != nil {
		return 0, fmt.Errorf("etcd write %s: %w", w.Key, err)
	}
	if !r.Succeeded {
		return 0, fmt.Errorf("etcd write %s at revision %d: %w", w.Key, w.ModRevision, ipam.ErrConflict)
	}
	if w.Delete {
		return 0, nil
	}
	return int64(r.Header.Revision), nil
}

// gatewayError is the gateway's error document.
type gatewayError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Error   string `json:"error"`
}

// gRPC codes that mean "try again" (Unavailable, DeadlineExceeded,
// Canceled, ResourceExhausted).
func transientCode(c int) bool { return c == 14 || c == 4 || c == 1 || c == 8 }

// call POSTs req to path and decodes the answer into out. A member that
// cannot be dialled is skipped for the next; any other failure is final
// for this call.
func (s *Store) call(ctx context.Context, path string, req, out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	resp, err := s.post(ctx, path, body, false)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return unavailable(ctx, err)
	}
	return decodeAnswer(ctx, resp.Status, data, out)
}

func decodeAnswer(ctx context.Context, status int, data []byte, out any) error {
	if status != 200 {
		var ge gatewayError
		_ = json.Unmarshal(data, &ge)
		msg := ge.Message
		if msg == "" {
			msg = strings.TrimSpace(string(data))
		}
		err := fmt.Errorf("etcd: HTTP %d: %s", status, msg)
		if transientCode(ge.Code) || status == 503 || strings.Contains(msg, "no leader") {
			return unavailable(ctx, err)
		}
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("etcd: undecodable answer: %v", err)
	}
	return nil
}

// post sends body to the current endpoint, moving on to the next one while
// they cannot be dialled.
func (s *Store) post(ctx context.Context, path string, body []byte, stream bool) (*minihttp.Response, error) {
	start := int(s.current.Load())
	var lastErr error
	for i := range s.endpoints {
		idx := (start + i) % len(s.endpoints)
		ep := s.endpoints[idx]
		var headers [][2]string
		if tok, err := s.authToken(ctx, ep); err != nil {
			return nil, err
		} else if tok != "" {
			headers = append(headers, [2]string{"Authorization", tok})
		}
		resp, err := s.client.Do(ctx, ep, request(path, headers, body, stream))
		if err == nil {
			s.current.Store(int32(idx))
			return resp, nil
		}
		lastErr = fmt.Errorf("%s: %w", ep.Base, err)
		var de *minihttp.DialError
		if ctx.Err() != nil || !errors.As(err, &de) {
			break // the request may have reached the member: do not resend
		}
	}
	return nil, unavailable(ctx, lastErr)
}

func request(path string, headers [][2]string, body []byte, stream bool) minihttp.Request {
	return minihttp.Request{Path: path, Header: headers, ContentType: "application/json", Body: body, Stream: stream}
}

// authToken logs in once when a user is configured.
func (s *Store) authToken(ctx context.Context, ep minihttp.Endpoint) (string, error) {
	if s.user == "" {
		return "", nil
	}
	s.tokenMu.Lock()
	defer s.tokenMu.Unlock()
	if s.token != "" {
		return s.token, nil
	}
	body, _ := json.Marshal(map[string]string{"name": s.user, "password": s.password})
	resp, err := s.client.Do(ctx, ep, request("/v3/auth/authenticate", nil, body, false))
	if err != nil {
		return "", unavailable(ctx, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var r struct {
		Token string `json:"token"`
	}
	if err := decodeAnswer(ctx, resp.Status, data, &r); err != nil {
		return "", fmt.Errorf("etcd authenticate %q: %w", s.user, err)
	}
	s.token = r.Token
	return s.token, nil
}

func unavailable(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ipam.ErrUnavailable, ctx.Err())
	}
	return fmt.Errorf("%w (%w)", ipam.ErrUnavailable, err)
}

// Watch implements ipam.Watcher over the gateway's streaming watch.
func (s *Store) Watch(ctx context.Context, prefix string, fromRev int64) (<-chan ipam.WatchResponse, error) {
	create := map[string]any{"key": []byte(prefix), "range_end": prefixEnd(prefix)}
	if fromRev > 0 {
		create["start_revision"] = strconv.FormatInt(fromRev, 10)
	}
	body, err := json.Marshal(map[string]any{"create_request": create})
	if err != nil {
		return nil, err
	}
	resp, err := s.post(ctx, "/v3/watch", body, true)
	if err != nil {
		return nil, fmt.Errorf("etcd watch %s: %w", prefix, err)
	}
	if resp.Status != 200 {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("etcd watch %s: %w", prefix, decodeAnswer(ctx, resp.Status, data, nil))
	}
	out := make(chan ipam.WatchResponse, 16)
	go streamWatch(ctx, resp.Body, out, prefix, fromRev)
	return out, nil
}

// streamWatch decodes the watch stream into out until ctx ends or the
// stream does; an error is the last response, and out is closed after it.
func streamWatch(ctx context.Context, body io.ReadCloser, out chan<- ipam.WatchResponse, prefix string, fromRev int64) {
	defer close(out)
	defer body.Close()
	send := func(r ipam.WatchResponse) bool {
		select {
		case out <- r:
			return true
		case <-ctx.Done():
			return false
		}
	}
	dec := json.NewDecoder(body)
	for {
		var msg watchMessage
		if err := dec.Decode(&msg); err != nil {
			if ctx.Err() == nil {
				send(ipam.WatchResponse{Err: fmt.Errorf("etcd watch %s: %w", prefix, unavailable(ctx, err))})
			}
			return
		}
		wr := msg.response(prefix, fromRev)
		if wr.Err == nil && len(wr.Events) == 0 {
			continue // created, or a progress notification
		}
		if !send(wr) || wr.Err != nil {
			return
		}
	}
}

// watchMessage is one message of the gateway's watch stream.
type watchMessage struct {
	Result *struct {
		CompactRevision int64s `json:"compact_revision"`
		Canceled        bool   `json:"canceled"`
		CancelReason    string `json:"cancel_reason"`
		Events          []struct {
			Type string `json:"type"` // omitted for PUT
			Kv   kvJSON `json:"kv"`
		} `json:"events"`
	} `json:"result"`
	Error *gatewayError `json:"error"`
}

// response is what the watcher gets for m: its events, or the error that
// ends the watch; neither for a message that carries nothing.
func (m *watchMessage) response(prefix string, fromRev int64) ipam.WatchResponse {
	r := m.Result
	switch {
	case m.Error != nil:
		return ipam.WatchResponse{Err: fmt.Errorf("etcd watch %s: %s", prefix, m.Error.Message)}
	case r == nil:
		return ipam.WatchResponse{}
	case r.CompactRevision != 0:
		return ipam.WatchResponse{Err: fmt.Errorf("watch %s from %d: compacted at %d: %w", prefix, fromRev, r.CompactRevision, ipam.ErrCompacted)}
	case r.Canceled:
		return ipam.WatchResponse{Err: fmt.Errorf("etcd watch %s canceled: %s: %w", prefix, r.CancelReason, ipam.ErrUnavailable)}
	}
	var wr ipam.WatchResponse
	for _, ev := range r.Events {
		e := ipam.Event{KV: ev.Kv.toKV()}
		if ev.Type == "DELETE" {
			e.Type = ipam.EventDelete
		}
		wr.Events = append(wr.Events, e)
	}
	return wr
}

// parseEndpoint accepts a member's base URL: scheme, host and port.
func parseEndpoint(raw string) (minihttp.Endpoint, error) {
	ep, err := minihttp.ParseEndpoint(raw)
	if err != nil {
		return ep, fmt.Errorf("etcd store: %w", err)
	}
	if ep.Path != "" {
		return ep, fmt.Errorf("etcd store: endpoint %q: want scheme://host:port", raw)
	}
	return ep, nil
}
