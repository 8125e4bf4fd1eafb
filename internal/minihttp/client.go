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

// Idle connection limits for a plugin, a process that lives for one CNI
// verb and sends its requests one after another: one connection is all it
// reuses, a second covers an overlap; 30 s is far more than a verb lasts,
// and less than the idle timeouts of load balancers that drop a
// connection without closing it (which no liveness check can see).
const (
	DefaultMaxIdle     = 2
	DefaultIdleTimeout = 30 * time.Second
)

// Client sends requests and keeps idle connections per host between
// them. The zero value dials plain TCP without a timeout; set the fields
// before the first request.
type Client struct {
	DialTimeout time.Duration
	// MaxIdle is how many idle connections are kept per host (default
	// DefaultMaxIdle): a long-lived caller sending requests concurrently
	// keeps more, or pays a new connection for each request over it.
	MaxIdle int
	// IdleTimeout is how long an idle connection may wait to be reused
	// (default DefaultIdleTimeout); an older one is closed instead.
	IdleTimeout time.Duration
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

// conn is a connection, TLS or not, over a probeConn.
type conn struct {
	net.Conn
	probe     *probeConn
	br        *bufio.Reader
	idleSince time.Time
}

// Do sends one request. An idle connection the server closed is dropped
// before use (alive). The server may still close one as the request
// leaves; such a request goes once more, on a new connection, when it
// cannot have reached the server (its write failed) or when it is
// idempotent and nothing came back. Any other failure after the write is
// the caller's: the server may have run the request, and it is not sent
// twice.
func (c *Client) Do(ctx context.Context, ep Endpoint, r Request) (*Response, error) {
	msg := r.encode(ep)
	if hc := c.get(ep); hc != nil {
		resp, err := c.roundTrip(ctx, ep, hc, msg, r.Stream)
		if err == nil {
			return resp, nil
		}
		hc.Close()
		if !r.resendable(err) || ctx.Err() != nil {
			return nil, err
		}
	}
	hc, err := c.dial(ctx, ep)
	if err != nil {
		return nil, err
	}
	resp, err := c.roundTrip(ctx, ep, hc, msg, r.Stream)
	if err != nil {
		hc.Close()
		return nil, err
	}
	return resp, nil
}

// resendable reports whether a request that failed with err on a reused
// connection may go again: it never reached the server whole, or it did
// and the server closed the connection without a byte of answer, and
// sending it twice is harmless (RFC 9110's idempotent methods).
func (r Request) resendable(err error) bool {
	var ce *closedError
	if !errors.As(err, &ce) {
		return false
	}
	if !ce.sent {
		return true
	}
	switch r.Method {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
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

// get returns an idle connection to ep that is alive and has not waited
// past the idle timeout, or nil. It closes the others it meets.
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
		if time.Since(hc.idleSince) <= c.idleTimeout() && hc.alive() {
			return hc
		}
		hc.Close()
	}
}

// alive looks, without waiting, whether an idle connection can carry a
// request. Only a read tells: on a plain connection, any byte the server
// sent unasked, or its close, means the connection is done. Under TLS,
// bytes may be records that carry no data (a session ticket, a key
// update), which crypto/tls consumes; a close_notify alert, the close of
// the TCP connection, or data nobody asked for means it is done. So the
// connection is read through its TLS layer, if any, with reads that never
// wait: alive is a read that would have had to wait.
func (hc *conn) alive() bool {
	if hc.br.Buffered() > 0 {
		return false
	}
	hc.probe.probing = true
	_, err := hc.br.Peek(1)
	hc.probe.probing = false
	return errors.Is(err, errWouldBlock)
}

func (c *Client) put(ep Endpoint, hc *conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle == nil {
		c.idle = map[string][]*conn{}
	}
	list := c.idle[ep.HostPort]
	// The oldest are first: drop the expired ones.
	for len(list) > 0 && time.Since(list[0].idleSince) > c.idleTimeout() {
		list[0].Close()
		list = list[1:]
	}
	if len(list) >= c.maxIdle() {
		hc.Close()
	} else {
		hc.idleSince = time.Now()
		list = append(list, hc)
	}
	c.idle[ep.HostPort] = list
}

func (c *Client) maxIdle() int {
	if c.MaxIdle > 0 {
		return c.MaxIdle
	}
	return DefaultMaxIdle
}

func (c *Client) idleTimeout() time.Duration {
	if c.IdleTimeout > 0 {
		return c.IdleTimeout
	}
	return DefaultIdleTimeout
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
	probe := &probeConn{Conn: raw}
	if !ep.TLS {
		return &conn{Conn: probe, probe: probe, br: bufio.NewReader(probe)}, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLSConfig != nil {
		cfg = c.TLSConfig.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = ep.Host
	}
	tc := tls.Client(probe, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", ep.HostPort, err)
	}
	return &conn{Conn: tc, probe: probe, br: bufio.NewReader(tc)}, nil
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

// closedError is a request that failed because the server closed the
// connection, or reset it: before the request was written whole (sent
// false: the server cannot have run it), or after, with not a byte of
// answer (it may have).
type closedError struct {
	sent bool
	err  error
}

func (e *closedError) Error() string {
	if e.sent {
		return "connection closed before any answer: " + e.err.Error()
	}
	return "connection closed while sending the request: " + e.err.Error()
}

func (e *closedError) Unwrap() error { return e.err }

// closedByPeer reports whether err says the peer closed or reset the
// connection, as opposed to a deadline, a cancellation or a local error.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED)
}

func (c *Client) roundTrip(ctx context.Context, ep Endpoint, hc *conn, msg string, stream bool) (*Response, error) {
	// Cancellation interrupts any blocked read or write at once.
	stop := context.AfterFunc(ctx, func() { hc.SetDeadline(time.Unix(1, 0)) })
	deadline, _ := ctx.Deadline()
	hc.SetDeadline(deadline) // zero: none
	if _, err := io.WriteString(hc, msg); err != nil {
		stop()
		if closedByPeer(err) {
			err = &closedError{sent: false, err: err}
		}
		return nil, err
	}
	if _, err := hc.br.Peek(1); err != nil {
		stop()
		if closedByPeer(err) {
			err = &closedError{sent: true, err: err}
		}
		return nil, err
	}
	h, err := readHead(hc.br)
	if err != nil {
		stop()
		return nil, err
	}
	b := &body{c: c, ep: ep, hc: hc, stop: stop}
	b.r, b.keep = h.bodyReader(hc.br)
	if stream {
		// Only cancellation ends a stream, not the deadline of the
		// request that opened it.
		hc.SetDeadline(time.Time{})
	}
	return &Response{Status: h.status, Header: h.header, Body: b}, nil
}

// probeConn is the TCP connection under a conn (and its TLS layer).
// While probing, its reads never wait: a read that would have to fails
// with errWouldBlock, an error crypto/tls takes as temporary (it keeps
// the connection and any partial record), and a closed connection reads
// io.EOF. Only the goroutine that holds the conn sets probing.
type probeConn struct {
	net.Conn
	probing bool
}

func (p *probeConn) Read(b []byte) (int, error) {
	if !p.probing {
		return p.Conn.Read(b)
	}
	sc, ok := p.Conn.(syscall.Conn)
	if !ok {
		return 0, errWouldBlock // cannot look (a test's Dial): trust it
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), b, unix.MSG_DONTWAIT)
		return true // never wait
	})
	switch {
	case err != nil:
		return 0, err
	case errors.Is(rerr, unix.EAGAIN):
		return 0, errWouldBlock
	case rerr != nil:
		return 0, rerr
	case n == 0 && len(b) > 0:
		return 0, io.EOF
	}
	return n, nil
}

// errWouldBlock is a probing read that found nothing to read. It is a
// net.Error that is temporary, so that crypto/tls does not make it the
// connection's permanent error.
var errWouldBlock error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "nothing to read yet" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }
