package minihttp

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxIdle is how many idle connections a Client keeps per host.
const maxIdle = 4

// Client sends requests and keeps idle connections per host between
// them. The zero value dials plain TCP without a timeout; set the fields
// before the first request.
type Client struct {
	DialTimeout time.Duration
	// TLSConfig is used for https endpoints; nil means the defaults
	// (system roots, TLS 1.2 or later).
	TLSConfig *tls.Config
	// Dial, when set, opens the TCP connections (tests reach servers in
	// network namespaces this way); DialTimeout still bounds it.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	mu   sync.Mutex
	idle map[string][]*conn
}

// Request is one request to an Endpoint.
type Request struct {
	Method string // default POST
	// Path, with its query, is appended to the endpoint's path.
	Path        string
	Header      [][2]string
	ContentType string // sent when set
	// Body is sent with a Content-Length; a nil Body sends none, except
	// with POST, PUT and PATCH, which always carry a length.
	Body []byte
	// Stream ties the response body to ctx alone: cancelling ctx ends
	// it, ctx's deadline does not. Otherwise the deadline bounds the
	// request and the response headers.
	Stream bool
}

// Response is a status, the headers, and a body. Closing the body after
// reading it to the end keeps the connection for the next request.
type Response struct {
	Status int
	// Header holds the headers in order, names in lower case.
	Header [][2]string
	Body   io.ReadCloser
}

// Get returns the first value of the header name (any case), or "".
func (r *Response) Get(name string) string {
	name = strings.ToLower(name)
	for _, h := range r.Header {
		if h[0] == name {
			return h[1]
		}
	}
	return ""
}

// DialError is a connection that could not be made: the request never
// left, so it may be sent elsewhere.
type DialError struct{ Err error }

func (e *DialError) Error() string { return e.Err.Error() }
func (e *DialError) Unwrap() error { return e.Err }

type conn struct {
	net.Conn
	raw net.Conn // the TCP connection under TLS, or Conn itself
	tls bool
	br  *bufio.Reader
}

// Do sends one request. An idle connection the server closed is dropped
// before use; one that fails on the write anyway cannot have delivered
// the request, which then goes again on a new connection. A failure after
// the write is the caller's: the server may have run the request, and it
// is not sent twice (as net/http does not either).
func (c *Client) Do(ctx context.Context, ep Endpoint, r Request) (*Response, error) {
	msg := r.encode(ep)
	for {
		hc, reused := c.get(ep), true
		if hc == nil {
			var err error
			if hc, err = c.dial(ctx, ep); err != nil {
				return nil, err
			}
			reused = false
		}
		resp, err := c.roundTrip(ctx, ep, hc, msg, r.Stream)
		if err == nil {
			return resp, nil
		}
		hc.Close()
		var stale *staleConnError
		if reused && errors.As(err, &stale) && ctx.Err() == nil {
			continue
		}
		return nil, err
	}
}

func (r Request) encode(ep Endpoint) string {
	method := r.Method
	if method == "" {
		method = "POST"
	}
	var b strings.Builder
	b.Grow(256 + len(r.Body))
	b.WriteString(method + " " + ep.Path + r.Path + " HTTP/1.1\r\nHost: " + ep.HostPort + "\r\n")
	if r.ContentType != "" {
		b.WriteString("Content-Type: " + r.ContentType + "\r\n")
	}
	if r.Body != nil || method == "POST" || method == "PUT" || method == "PATCH" {
		b.WriteString("Content-Length: " + strconv.Itoa(len(r.Body)) + "\r\n")
	}
	for _, h := range r.Header {
		b.WriteString(h[0] + ": " + h[1] + "\r\n")
	}
	b.WriteString("\r\n")
	b.Write(r.Body)
	return b.String()
}

// get returns an idle connection to ep that the server has not closed,
// or nil.
func (c *Client) get(ep Endpoint) *conn {
	for {
		c.mu.Lock()
		list := c.idle[ep.HostPort]
		if len(list) == 0 {
			c.mu.Unlock()
			return nil
		}
		hc := list[len(list)-1]
		c.idle[ep.HostPort] = list[:len(list)-1]
		c.mu.Unlock()
		if hc.alive() {
			return hc
		}
		hc.Close()
	}
}

// alive looks, without waiting, whether the server has closed an idle
// connection. Bytes waiting on a plain connection are as bad (nothing was
// asked); on a TLS one they may be a session ticket, for crypto/tls.
func (hc *conn) alive() bool {
	if hc.br.Buffered() > 0 {
		return false
	}
	sc, ok := hc.raw.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, rerr := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case errors.Is(rerr, unix.EAGAIN):
			alive = true // open, nothing to read
		case rerr == nil && n > 0:
			alive = hc.tls
		}
		return true // never wait
	})
	return err == nil && alive
}

func (c *Client) put(ep Endpoint, hc *conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle == nil {
		c.idle = map[string][]*conn{}
	}
	if len(c.idle[ep.HostPort]) >= maxIdle {
		hc.Close()
		return
	}
	c.idle[ep.HostPort] = append(c.idle[ep.HostPort], hc)
}

// CloseIdle closes the idle connections.
func (c *Client) CloseIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, list := range c.idle {
		for _, hc := range list {
			hc.Close()
		}
	}
	c.idle = nil
}

func (c *Client) dial(ctx context.Context, ep Endpoint) (*conn, error) {
	raw, err := c.dialTCP(ctx, ep)
	if err != nil {
		return nil, &DialError{err}
	}
	if !ep.TLS {
		return &conn{Conn: raw, raw: raw, br: bufio.NewReader(raw)}, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLSConfig != nil {
		cfg = c.TLSConfig.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = ep.Host
	}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", ep.HostPort, err)
	}
	return &conn{Conn: tc, raw: raw, tls: true, br: bufio.NewReader(tc)}, nil
}

func (c *Client) dialTCP(ctx context.Context, ep Endpoint) (net.Conn, error) {
	if c.DialTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.DialTimeout)
		defer cancel()
	}
	if c.Dial != nil {
		return c.Dial(ctx, "tcp", ep.HostPort)
	}
	d := net.Dialer{KeepAlive: 30 * time.Second}
	return d.DialContext(ctx, "tcp", ep.HostPort)
}

// staleConnError is a connection that failed while the request was
// being written: the server cannot have run it.
type staleConnError struct{ err error }

func (e *staleConnError) Error() string { return e.err.Error() }
func (e *staleConnError) Unwrap() error { return e.err }

func (c *Client) roundTrip(ctx context.Context, ep Endpoint, hc *conn, msg string, stream bool) (*Response, error) {
	// Cancellation interrupts any blocked read or write at once.
	stop := context.AfterFunc(ctx, func() { hc.SetDeadline(time.Unix(1, 0)) })
	deadline, _ := ctx.Deadline()
	hc.SetDeadline(deadline) // zero: none
	if _, err := io.WriteString(hc, msg); err != nil {
		stop()
		return nil, &staleConnError{err}
	}
	h, err := readHead(hc.br)
	if err != nil {
		stop()
		return nil, err
	}
	b := &body{c: c, ep: ep, hc: hc, keep: h.keep, stop: stop}
	switch {
	case h.status == 204 || h.status == 304:
		b.r = io.LimitReader(hc.br, 0) // no body, whatever the headers say
	case h.chunked:
		b.r = &chunkedReader{br: hc.br}
	case h.length >= 0:
		b.r = io.LimitReader(hc.br, h.length)
	default:
		b.r, b.keep = hc.br, false // until the server closes
	}
	if stream {
		// Only cancellation ends a stream, not the deadline of the
		// request that opened it.
		hc.SetDeadline(time.Time{})
	}
	return &Response{Status: h.status, Header: h.header, Body: b}, nil
}
