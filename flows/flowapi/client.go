package flowapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/podnet/podnet/flows"
)

// Client reads one agent's flows. URL is where the agent's paths are:
// http://node:9603, or an agent pod's proxy on the API server
// (.../api/v1/namespaces/NS/pods/NAME:PORT/proxy) with HTTP the API
// server's authenticated client.
type Client struct {
	URL string
	// HTTP is the client requests go through (nil: http.DefaultClient).
	HTTP *http.Client
	// Timeout bounds a List, and how long Open waits for the answer's
	// headers; 0: no bound but the context's.
	Timeout time.Duration
}

// StatusError is an answer other than 200: its code and its text (the
// agent's, or the API server's message).
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("GET %s: %d %s: %s", Path, e.Code, http.StatusText(e.Code), e.Message)
}

// List returns the newest limit records f selects (limit 0: the agent's
// default), oldest first.
func (c *Client) List(ctx context.Context, f flows.Filter, limit int) ([]flows.Record, error) {
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	if limit <= 0 {
		limit = DefaultLimit
	}
	s, err := c.Open(ctx, Query{Filter: f, Limit: limit})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var out []flows.Record
	for {
		rec, err := s.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, rec)
	}
}

// Follow calls fn with every new record f selects until ctx ends (then
// it returns nil), fn fails, or the stream does.
func (c *Client) Follow(ctx context.Context, f flows.Filter, fn func(flows.Record) error) error {
	s, err := c.Open(ctx, Query{Filter: f, Follow: true})
	if err != nil {
		return err
	}
	defer s.Close()
	for {
		rec, err := s.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
}

// Stream is an open answer of /flows.
type Stream struct {
	// Snapshot is how many records of the snapshot come first; Node is
	// the agent's node.
	Snapshot int
	Node     string
	body     io.ReadCloser
	dec      *json.Decoder
	cancel   context.CancelFunc
}

// Open sends q and returns the answer once its headers are in.
func (c *Client) Open(ctx context.Context, q Query) (*Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.URL, "/")+Path+"?"+q.Values().Encode(), nil)
	if err != nil {
		cancel()
		return nil, err
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	var timer *time.Timer
	if c.Timeout > 0 {
		timer = time.AfterFunc(c.Timeout, cancel)
	}
	resp, err := hc.Do(req)
	if timer != nil && !timer.Stop() {
		if err == nil {
			resp.Body.Close()
		}
		err = fmt.Errorf("GET %s: no answer in %v: %w", Path, c.Timeout, context.DeadlineExceeded)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		return nil, &StatusError{Code: resp.StatusCode, Message: errorText(resp.Body)}
	}
	n, _ := strconv.Atoi(resp.Header.Get(SnapshotHeader))
	return &Stream{Snapshot: n, Node: resp.Header.Get(NodeHeader), body: resp.Body, dec: json.NewDecoder(resp.Body), cancel: cancel}, nil
}

// Next returns the next record; io.EOF at the end of the answer.
func (s *Stream) Next() (flows.Record, error) {
	var rec flows.Record
	if err := s.dec.Decode(&rec); err != nil {
		if errors.Is(err, io.EOF) {
			return rec, io.EOF
		}
		return rec, fmt.Errorf("read %s: %w", Path, err)
	}
	return rec, nil
}

// Close ends the request.
func (s *Stream) Close() error {
	s.cancel()
	return s.body.Close()
}

// errorText is an error answer's text: the message of an API server's
// Status, else the body as it is.
func errorText(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 4096))
	var st struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &st) == nil && st.Kind == "Status" && st.Message != "" {
		return st.Message
	}
	return strings.TrimSpace(string(b))
}
