package etcdgw

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The gateway is spoken to with a small HTTP/1.1 client of this package's
// own rather than net/http: every plugin exec pays for the packages it
// links (net/http's initialisation and pages cost the podnet plugin about
// 0.25 ms per exec here), and all it needs is a POST with a JSON body, a
// status, and a body with a length or in chunks (the watch stream).

// endpoint is one member's base URL, parsed once.
type endpoint struct {
	base     string // as given, for messages
	tls      bool
	hostPort string // host:port to dial
	host     string // for Host and TLS server name
}

func parseEndpoint(raw string) (endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return endpoint{}, fmt.Errorf("etcd store: endpoint %q: %w", raw, err)
	}
	ep := endpoint{base: raw, host: u.Hostname()}
	port := u.Port()
	switch u.Scheme {
	case "http":
		if port == "" {
			port = "80"
		}
	case "https":
		ep.tls = true
		if port == "" {
			port = "443"
		}
	default:
		return endpoint{}, fmt.Errorf("etcd store: endpoint %q: scheme must be http or https", raw)
	}
	if ep.host == "" || (u.Path != "" && u.Path != "/") {
		return endpoint{}, fmt.Errorf("etcd store: endpoint %q: want scheme://host:port", raw)
	}
	ep.hostPort = net.JoinHostPort(ep.host, port)
	return ep, nil
}

// dialError is a connection that could not be made: the request never
// left, so another member may be tried.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// httpClient keeps idle connections per endpoint between requests.
type httpClient struct {
	dialTimeout time.Duration
	tlsConfig   *tls.Config

	mu   sync.Mutex
	idle map[string][]*httpConn
}

type httpConn struct {
	net.Conn
	raw net.Conn // the TCP connection under TLS, or Conn itself
	tls bool
	br  *bufio.Reader
}

// response is a status and a body. Closing the body after reading it to
// the end keeps the connection for the next request.
type response struct {
	status int
	body   io.ReadCloser
}

// get returns an idle connection to ep that the member has not closed,
// or nil.
func (c *httpClient) get(ep endpoint) *httpConn {
	for {
		c.mu.Lock()
		list := c.idle[ep.hostPort]
		if len(list) == 0 {
			c.mu.Unlock()
			return nil
		}
		hc := list[len(list)-1]
		c.idle[ep.hostPort] = list[:len(list)-1]
		c.mu.Unlock()
		if hc.alive() {
			return hc
		}
		hc.Close()
	}
}

// alive looks, without waiting, whether the member has closed an idle
// connection. Bytes waiting on a plain connection are as bad (nothing was
// asked); on a TLS one they may be a session ticket, for crypto/tls.
func (hc *httpConn) alive() bool {
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

func (c *httpClient) put(ep endpoint, hc *httpConn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle == nil {
		c.idle = map[string][]*httpConn{}
	}
	if len(c.idle[ep.hostPort]) >= 4 {
		hc.Close()
		return
	}
	c.idle[ep.hostPort] = append(c.idle[ep.hostPort], hc)
}

func (c *httpClient) closeIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, list := range c.idle {
		for _, hc := range list {
			hc.Close()
		}
	}
	c.idle = nil
}

func (c *httpClient) dial(ctx context.Context, ep endpoint) (*httpConn, error) {
	d := net.Dialer{Timeout: c.dialTimeout, KeepAlive: 30 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", ep.hostPort)
	if err != nil {
		return nil, &dialError{err}
	}
	if !ep.tls {
		return &httpConn{Conn: raw, raw: raw, br: bufio.NewReader(raw)}, nil
	}
	cfg := c.tlsConfig.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = ep.host
	}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", ep.hostPort, err)
	}
	return &httpConn{Conn: tc, raw: raw, tls: true, br: bufio.NewReader(tc)}, nil
}

// post sends one request. A stream's body stays tied to ctx: cancelling
// ctx ends it. Otherwise ctx bounds the request and the response headers.
func (c *httpClient) post(ctx context.Context, ep endpoint, path string, headers [][2]string, body []byte, stream bool) (*response, error) {
	var req strings.Builder
	req.Grow(256 + len(body))
	req.WriteString("POST " + path + " HTTP/1.1\r\nHost: " + ep.hostPort + "\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n")
	for _, h := range headers {
		req.WriteString(h[0] + ": " + h[1] + "\r\n")
	}
	req.WriteString("\r\n")
	req.Write(body)
	msg := req.String()

	// An idle connection the member closed is dropped before use (get);
	// one that fails on the write anyway cannot have delivered the
	// request, which then goes again on a new connection. A failure after
	// the write is the caller's: the member may have run the request, and
	// a POST is not sent twice (as net/http does not either).
	for {
		hc, reused := c.get(ep), true
		if hc == nil {
			var err error
			if hc, err = c.dial(ctx, ep); err != nil {
				return nil, err
			}
			reused = false
		}
		resp, err := c.roundTrip(ctx, ep, hc, msg, stream)
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

// staleConnError is a connection that failed while the request was
// being written: the member cannot have run it.
type staleConnError struct{ err error }

func (e *staleConnError) Error() string { return e.err.Error() }
func (e *staleConnError) Unwrap() error { return e.err }

func (c *httpClient) roundTrip(ctx context.Context, ep endpoint, hc *httpConn, msg string, stream bool) (*response, error) {
	// Cancellation interrupts any blocked read or write at once.
	stop := context.AfterFunc(ctx, func() { hc.SetDeadline(time.Unix(1, 0)) })
	deadline, _ := ctx.Deadline()
	hc.SetDeadline(deadline) // zero: none
	if _, err := io.WriteString(hc, msg); err != nil {
		stop()
		return nil, &staleConnError{err}
	}
	status, length, chunked, keep, err := readHead(hc.br)
	if err != nil {
		stop()
		return nil, err
	}
	b := &body{c: c, ep: ep, hc: hc, keep: keep, stop: stop}
	switch {
	case status == 204 || status == 304:
		b.r = io.LimitReader(hc.br, 0) // no body, whatever the headers say
	case chunked:
		b.r = &chunkedReader{br: hc.br}
	case length >= 0:
		b.r = io.LimitReader(hc.br, length)
	default:
		b.r, b.keep = hc.br, false // until the member closes
	}
	if stream {
		// Only cancellation ends a stream, not the deadline of the
		// request that opened it.
		hc.SetDeadline(time.Time{})
	}
	return &response{status: status, body: b}, nil
}

// readHead reads the status line and headers. length is -1 when the
// response has no Content-Length.
func readHead(br *bufio.Reader) (status int, length int64, chunked, keep bool, err error) {
	for {
		line, err := readLine(br)
		if err != nil {
			return 0, 0, false, false, err
		}
		proto, rest, _ := strings.Cut(line, " ")
		code, _, _ := strings.Cut(rest, " ")
		status, err = strconv.Atoi(code)
		if !strings.HasPrefix(proto, "HTTP/1.") || err != nil || status < 100 {
			return 0, 0, false, false, fmt.Errorf("malformed HTTP status line %q", line)
		}
		length, keep = -1, proto == "HTTP/1.1"
		for {
			h, err := readLine(br)
			if err != nil {
				return 0, 0, false, false, err
			}
			if h == "" {
				break
			}
			name, value, _ := strings.Cut(h, ":")
			value = strings.TrimSpace(value)
			switch strings.ToLower(name) {
			case "content-length":
				if length, err = strconv.ParseInt(value, 10, 64); err != nil || length < 0 {
					return 0, 0, false, false, fmt.Errorf("malformed Content-Length %q", value)
				}
			case "transfer-encoding":
				chunked = strings.EqualFold(value, "chunked")
			case "connection":
				if strings.EqualFold(value, "close") {
					keep = false
				}
			}
		}
		if status >= 200 {
			return status, length, chunked, keep, nil
		}
		// 1xx: an interim response; the real one follows.
	}
}

func readLine(br *bufio.Reader) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		if errors.Is(err, io.EOF) && line != "" {
			err = io.ErrUnexpectedEOF
		}
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// body hands the connection back once read to the end.
type body struct {
	c    *httpClient
	ep   endpoint
	hc   *httpConn
	r    io.Reader
	keep bool
	stop func() bool
	done bool // read to io.EOF
	err  error
}

func (b *body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	if errors.Is(err, io.EOF) {
		b.done = true
	}
	b.err = err
	return n, err
}

func (b *body) Close() error {
	if b.hc == nil {
		return nil
	}
	stopped := b.stop()
	if b.done && b.keep && stopped {
		b.hc.SetDeadline(time.Time{})
		b.c.put(b.ep, b.hc)
	} else {
		b.hc.Close()
	}
	b.hc = nil
	return nil
}

// chunkedReader decodes a chunked body.
type chunkedReader struct {
	br   *bufio.Reader
	left int64 // of the current chunk
	eof  bool
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if c.eof {
		return 0, io.EOF
	}
	if c.left == 0 {
		line, err := readLine(c.br)
		if err != nil {
			return 0, noEOF(err)
		}
		size, _, _ := strings.Cut(line, ";")
		n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("malformed chunk size %q", line)
		}
		if n == 0 {
			for { // trailers, up to the empty line
				t, err := readLine(c.br)
				if err != nil {
					return 0, noEOF(err)
				}
				if t == "" {
					break
				}
			}
			c.eof = true
			return 0, io.EOF
		}
		c.left = n
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.br.Read(p)
	c.left -= int64(n)
	if err != nil {
		return n, noEOF(err)
	}
	if c.left == 0 {
		if line, err := readLine(c.br); err != nil || line != "" {
			return n, fmt.Errorf("malformed chunk end")
		}
	}
	return n, nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
