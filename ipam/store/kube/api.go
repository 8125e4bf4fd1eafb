package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/podnet/podnet/internal/minihttp"
	"github.com/podnet/podnet/ipam"
)

// APIError is an answer of the API server other than success: its
// status code and the Status object's reason and message. Errors the
// allocator acts on also match ipam.ErrConflict, ipam.ErrNotFound,
// ipam.ErrUnavailable or ipam.ErrDenied.
type APIError struct {
	Op      string // e.g. "PUT ipamblocks/10-244-1-64-26"
	Code    int
	Reason  string // e.g. "Invalid", "Forbidden", "Conflict"
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("kubernetes store: %s: %d %s: %s", e.Op, e.Code, e.Reason, e.Message)
}

// status is the API's Status object.
type status struct {
	Message string `json:"message"`
	Reason  string `json:"reason"`
}

func apiError(op string, code int, body []byte) *APIError {
	var st status
	_ = json.Unmarshal(body, &st)
	if st.Message == "" {
		st.Message = strings.TrimSpace(string(body))
		if len(st.Message) > 200 {
			st.Message = st.Message[:200] + "..."
		}
	}
	return &APIError{Op: op, Code: code, Reason: st.Reason, Message: st.Message}
}

// errorFor maps a failed answer to the error the allocator acts on:
// unavailable for what a retry may fix, denied for credentials or rights
// that must be fixed first, the API's message otherwise.
func (s *Store) errorFor(ctx context.Context, e *APIError) error {
	switch e.Code {
	case 409:
		return fmt.Errorf("%w: %w", e, ipam.ErrConflict)
	case 404:
		return fmt.Errorf("%w: %w", e, ipam.ErrNotFound)
	case 401:
		return fmt.Errorf("%w: the API server %s does not accept the credentials of %s (a token or client certificate that expired, was revoked or is of another cluster); check them: %w",
			e, s.t.Server(), s.creds, ipam.ErrDenied)
	case 403:
		return fmt.Errorf("%w: the credentials of %s are not allowed to %s; check the RBAC rules bound to its user (podnet's ClusterRole: deploy/kubernetes/blocks/rbac.yaml): %w",
			e, s.creds, e.verb(), ipam.ErrDenied)
	case 410, 429, 500, 502, 503, 504:
		return unavailable(ctx, e)
	}
	return e
}

// verb names what a request asked, as RBAC rules name it.
func (e *APIError) verb() string {
	method, path, _ := strings.Cut(e.Op, " ")
	plural, name, _ := strings.Cut(path, "/")
	verb := map[string]string{"GET": "get", "POST": "create", "PUT": "update", "DELETE": "delete"}[method]
	if method == "GET" && name == "" {
		verb = "list"
	}
	if verb == "" {
		verb = method
	}
	return verb + " " + Group + " " + plural
}

func unavailable(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w: %w)", ipam.ErrUnavailable, ctx.Err(), err)
	}
	return fmt.Errorf("%w (%w)", ipam.ErrUnavailable, err)
}

// call is one request: method and path under /apis/podnet.io/v1/.
type call struct {
	method string
	path   string
	body   []byte
}

func (c call) op() string {
	p, _, _ := strings.Cut(c.path, "?")
	return c.method + " " + p
}

// do sends c and returns the status and body of an answer the server
// ran, or an error. It resends only what the server refused unrun: a
// 429 after its Retry-After, if that fits in ctx's deadline, and a 401
// once after re-reading the token file.
func (s *Store) do(ctx context.Context, c call) (int, []byte, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, unavailable(ctx, fmt.Errorf("%s: %w", c.op(), err))
	}
	reread := false
	for {
		if err := s.waitThrottle(ctx); err != nil {
			return 0, nil, unavailable(ctx, fmt.Errorf("%s: %w", c.op(), err))
		}
		a, err := s.send(ctx, c)
		if err != nil {
			return 0, nil, unavailable(ctx, fmt.Errorf("%s: %s: %w", c.op(), s.t.Server(), err))
		}
		switch {
		case a.Status == 401 && !reread:
			// The token may have been rotated since it was read.
			reread = true
			mt, ok := s.t.(*miniTransport)
			if !ok || mt.conn.tokenFile == "" {
				break
			}
			if err := mt.rereadToken(); err != nil {
				return 0, nil, fmt.Errorf("kubernetes store: %s: 401 Unauthorized, and the token cannot be read again: %w: %w", c.op(), err, ipam.ErrDenied)
			}
			continue
		case a.Status == 429:
			pause := max(parseRetryAfter(a.RetryAfter), minPause)
			s.throttle(pause)
			if fits(ctx, pause) {
				continue
			}
		}
		return a.Status, a.Body, nil
	}
}

func (s *Store) send(ctx context.Context, c call) (Response, error) {
	return s.t.Do(ctx, Request{Method: c.method, Path: "/apis/" + Group + "/" + Version + "/" + c.path, Body: c.body})
}

// miniTransport is the default Transport: minihttp, with the token or
// client certificate of a kubeconfig.
type miniTransport struct {
	conn    *conn
	client  *minihttp.Client
	tokenMu sync.Mutex
}

func (t *miniTransport) Server() string { return t.conn.server.Base }

func (t *miniTransport) Do(ctx context.Context, r Request) (Response, error) {
	hdr := [][2]string{{"Accept", "application/json"}}
	if tok := t.bearer(); tok != "" {
		hdr = append(hdr, [2]string{"Authorization", "Bearer " + tok})
	}
	req := minihttp.Request{Method: r.Method, Path: r.Path, Header: hdr, Body: r.Body}
	if r.Body != nil {
		req.ContentType = "application/json"
	}
	resp, err := t.client.Do(ctx, t.conn.server, req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	return Response{Status: resp.Status, RetryAfter: resp.Get("Retry-After"), Body: body}, nil
}

func (t *miniTransport) bearer() string {
	t.tokenMu.Lock()
	defer t.tokenMu.Unlock()
	return t.conn.token
}

func (t *miniTransport) rereadToken() error {
	tok, err := readToken(t.conn.tokenFile)
	if err != nil {
		return err
	}
	t.tokenMu.Lock()
	t.conn.token = tok
	t.tokenMu.Unlock()
	return nil
}

// minPause is the least a 429 holds requests back, whatever its
// Retry-After says (0): resending at once only adds to the load.
const minPause = 100 * time.Millisecond

// parseRetryAfter reads a Retry-After in seconds (the API server's
// form); without one, a second.
func parseRetryAfter(v string) time.Duration {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 || n > 3600 {
		return time.Second
	}
	return time.Duration(n) * time.Second
}

// throttle records a 429's Retry-After: no request leaves before it has
// passed, this one's resend or any other (the API server's priority and
// fairness throttles a flow, not a request), so that the allocator's own
// retries, which come sooner, do not hammer a server that asked for a
// pause.
func (s *Store) throttle(d time.Duration) {
	until := time.Now().Add(d).UnixNano()
	for {
		cur := s.notBefore.Load()
		if cur >= until || s.notBefore.CompareAndSwap(cur, until) {
			return
		}
	}
}

// waitThrottle waits out the last Retry-After, or fails at once if
// ctx's deadline comes first.
func (s *Store) waitThrottle(ctx context.Context) error {
	d := time.Until(time.Unix(0, s.notBefore.Load()))
	if d <= 0 {
		return nil
	}
	if !fits(ctx, d) {
		return fmt.Errorf("the API server asked for a pause (429 Too Many Requests) of %v more, past the deadline", d.Round(time.Millisecond))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fits reports whether waiting d leaves time before ctx's deadline.
func fits(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) > d
}

// meta is the metadata the store reads and writes.
type meta struct {
	Name            string            `json:"name"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
}

// object is a custom resource as the store writes and reads it.
type object struct {
	APIVersion string          `json:"apiVersion,omitempty"`
	Kind       string          `json:"kind,omitempty"`
	Metadata   meta            `json:"metadata"`
	Spec       json.RawMessage `json:"spec"`
}

// kv decodes an answer holding one object.
func (s *Store) kv(r ref, body []byte) (ipam.KV, error) {
	var o object
	if err := json.Unmarshal(body, &o); err != nil {
		return ipam.KV{}, fmt.Errorf("kubernetes store: %s: undecodable answer: %v", r, err)
	}
	return s.toKV(r.res, o)
}

func (s *Store) toKV(res *resource, o object) (ipam.KV, error) {
	what := res.plural + "/" + o.Metadata.Name
	if len(o.Spec) == 0 || string(o.Spec) == "null" {
		return ipam.KV{}, fmt.Errorf("kubernetes store: %s: no spec", what)
	}
	key, err := s.names.keyOf(res, o.Metadata.Name, o.Spec)
	if err != nil {
		return ipam.KV{}, err
	}
	if o.Metadata.ResourceVersion == "" {
		return ipam.KV{}, fmt.Errorf("kubernetes store: %s: no resourceVersion", what)
	}
	rev := s.revs.token(what, o.Metadata.ResourceVersion)
	return ipam.KV{Key: key, Value: []byte(o.Spec), ModRevision: rev}, nil
}
