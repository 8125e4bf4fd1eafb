package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/podnet/podnet/internal/minihttp"
	"github.com/podnet/podnet/ipam"
)

// APIError is an answer of the API server other than success: its
// status code and the Status object's reason and message. Errors the
// allocator acts on also match ipam.ErrConflict, ipam.ErrNotFound or
// ipam.ErrUnavailable.
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
// unavailable for what a retry may fix, the API's message otherwise.
func errorFor(ctx context.Context, e *APIError) error {
	switch e.Code {
	case 409:
		return fmt.Errorf("%w: %w", e, ipam.ErrConflict)
	case 404:
		return fmt.Errorf("%w: %w", e, ipam.ErrNotFound)
	case 401, 410, 429, 500, 502, 503, 504:
		return unavailable(ctx, e)
	}
	return e
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
// 429 while its Retry-After fits in ctx's deadline, and a 401 once after
// re-reading the token file.
func (s *Store) do(ctx context.Context, c call) (int, []byte, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, unavailable(ctx, fmt.Errorf("%s: %w", c.op(), err))
	}
	reread := false
	for {
		a, err := s.send(ctx, c)
		if err != nil {
			return 0, nil, unavailable(ctx, fmt.Errorf("%s: %s: %w", c.op(), s.conn.server.Base, err))
		}
		switch {
		case a.code == 401 && !reread && s.conn.tokenFile != "":
			reread = true
			if err := s.rereadToken(); err != nil {
				return 0, nil, unavailable(ctx, fmt.Errorf("%s: 401, and %w", c.op(), err))
			}
			continue
		case a.code == 429 && waitRetryAfter(ctx, a.retryAfter):
			continue
		}
		return a.code, a.body, nil
	}
}

// answer is a response read to its end.
type answer struct {
	code       int
	body       []byte
	retryAfter time.Duration // of a 429
}

func (s *Store) send(ctx context.Context, c call) (answer, error) {
	hdr := [][2]string{{"Accept", "application/json"}}
	if tok := s.bearer(); tok != "" {
		hdr = append(hdr, [2]string{"Authorization", "Bearer " + tok})
	}
	req := minihttp.Request{Method: c.method, Path: "/apis/" + Group + "/" + Version + "/" + c.path, Header: hdr, Body: c.body}
	if c.body != nil {
		req.ContentType = "application/json"
	}
	resp, err := s.client.Do(ctx, s.conn.server, req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{code: resp.Status, body: body}
	if a.code == 429 {
		a.retryAfter = parseRetryAfter(resp.Get("Retry-After"))
	}
	return a, nil
}

// parseRetryAfter reads a Retry-After in seconds (the API server's
// form); without one, a second.
func parseRetryAfter(v string) time.Duration {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 || n > 3600 {
		return time.Second
	}
	return time.Duration(n) * time.Second
}

// waitRetryAfter waits d, as a 429 asked, if ctx's deadline allows it.
func waitRetryAfter(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *Store) bearer() string {
	s.tokenMu.Lock()
	defer s.tokenMu.Unlock()
	return s.conn.token
}

func (s *Store) rereadToken() error {
	tok, err := readToken(s.conn.tokenFile)
	if err != nil {
		return err
	}
	s.tokenMu.Lock()
	s.conn.token = tok
	s.tokenMu.Unlock()
	return nil
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

// revision parses a resourceVersion. One that is not a decimal integer
// breaks the store for good: its revisions would not be etcd's.
func (s *Store) revision(what, rv string) (int64, error) {
	n, err := strconv.ParseInt(rv, 10, 64)
	if err == nil && n > 0 {
		return n, nil
	}
	bad := fmt.Errorf("kubernetes store: %s: resourceVersion %q is not a positive decimal integer: the store needs an etcd3-backed API server, whose resourceVersions are etcd revisions", what, rv)
	s.broken.CompareAndSwap(nil, &bad)
	return 0, bad
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
	rev, err := s.revision(what, o.Metadata.ResourceVersion)
	if err != nil {
		return ipam.KV{}, err
	}
	return ipam.KV{Key: key, Value: []byte(o.Spec), ModRevision: rev}, nil
}
