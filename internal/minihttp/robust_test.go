package minihttp

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHeadLimits: what a server sends before a body is bounded, and
// passing a bound is errHeaderLimit with a message naming it.
func TestHeadLimits(t *testing.T) {
	headers := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "X-H%d: v\r\n", i)
		}
		return b.String()
	}
	long := func(n int) string { return "X-Long: " + strings.Repeat("a", n-len("X-Long: \r\n")) + "\r\n" }
	for _, tt := range []struct {
		name, in string
		want     string // in the error; "" for none
	}{
		{"a line longer than bufio's buffer", "HTTP/1.1 200 OK\r\n" + long(maxLine) + "\r\n", ""},
		{"a line over the bound", "HTTP/1.1 200 OK\r\n" + long(maxLine+1) + "\r\n", "a line longer than 16384 bytes"},
		{"a status line over the bound", "HTTP/1.1 200 " + strings.Repeat("K", maxLine) + "\r\n\r\n", "a line longer than 16384 bytes"},
		{"a line without end", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 3*maxLine), "a line longer than 16384 bytes"},
		{"100 headers", "HTTP/1.1 200 OK\r\n" + headers(100) + "\r\n", ""},
		{"101 headers", "HTTP/1.1 200 OK\r\n" + headers(101) + "\r\n", "more than 100 header lines"},
		{"10 interim responses", strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 10) + "HTTP/1.1 200 OK\r\n\r\n", ""},
		{"11 interim responses", strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 11) + "HTTP/1.1 200 OK\r\n\r\n", "more than 10 interim (1xx) responses"},
	} {
		_, err := readHead(bufio.NewReader(strings.NewReader(tt.in)))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (!errors.Is(err, errHeaderLimit) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want errHeaderLimit saying %q", tt.name, err, tt.want)
		}
	}
	trailers := "0\r\n" + headers(101) + "\r\n"
	if _, err := io.ReadAll(&chunkedReader{br: bufio.NewReader(strings.NewReader(trailers))}); !errors.Is(err, errHeaderLimit) {
		t.Errorf("101 trailers: %v, want errHeaderLimit", err)
	}
	size := strings.Repeat("0", maxLine) + "5\r\nhello\r\n0\r\n\r\n"
	if _, err := io.ReadAll(&chunkedReader{br: bufio.NewReader(strings.NewReader(size))}); !errors.Is(err, errHeaderLimit) {
		t.Errorf("chunk size line of %d bytes: %v, want errHeaderLimit", len(size), err)
	}
}

// A server's oversized header reaches the caller as errHeaderLimit, and
// the connection is not kept.
func TestHeadLimitsOverTheWire(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("b", maxLine))
		io.WriteString(w, "{}")
	}))
	defer srv.Close()
	ep, err := ParseEndpoint(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{}
	defer c.CloseIdle()
	_, err = c.Do(t.Context(), ep, Request{Method: "GET", Path: "/"})
	if !errors.Is(err, errHeaderLimit) || !strings.Contains(err.Error(), "16384") {
		t.Fatalf("Do: %v, want errHeaderLimit naming 16384 bytes", err)
	}
	if n := idleCount(c, ep); n != 0 {
		t.Errorf("%d idle connections after a refused answer, want 0", n)
	}
}

// rawServer accepts connections and hands the i-th (from 0) to
// handle; it counts the requests it reads with readRequest.
type rawServer struct {
	ep       Endpoint
	requests atomic.Int32
	conns    atomic.Int32
}

func newRawServer(t *testing.T, handle func(s *rawServer, i int, c net.Conn, br *bufio.Reader)) *rawServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{}
	if s.ep, err = ParseEndpoint("http://" + l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			i := int(s.conns.Add(1)) - 1
			wg.Go(func() {
				defer c.Close()
				handle(s, i, c, bufio.NewReader(c))
			})
		}
	})
	return s
}

// read reads one request and counts it.
func (s *rawServer) read(br *bufio.Reader) bool {
	if skipRequest(br) != nil {
		return false
	}
	s.requests.Add(1)
	return true
}

func ok(c net.Conn) { io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}") }

// answerAll answers every request on the connection.
func (s *rawServer) answerAll(c net.Conn, br *bufio.Reader) {
	for s.read(br) {
		ok(c)
	}
}

func do(ctx context.Context, c *Client, ep Endpoint, method string) error {
	resp, err := c.Do(ctx, ep, Request{Method: method, Path: "/x", Body: []byte("{}")})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	return err
}

func idleCount(c *Client, ep Endpoint) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.idle[ep.HostPort])
}

// The server closes a kept connection as the next request arrives: it
// reads the request and closes without a byte of answer. An idempotent
// request goes once more on a new connection; a POST, which the server
// may have run, is the caller's error.
func TestClosedAsRequestArrives(t *testing.T) {
	for _, tt := range []struct {
		method string
		resent bool
	}{{"GET", true}, {"PUT", true}, {"DELETE", true}, {"POST", false}, {"PATCH", false}} {
		s := newRawServer(t, func(s *rawServer, i int, c net.Conn, br *bufio.Reader) {
			if i > 0 {
				s.answerAll(c, br)
				return
			}
			if s.read(br) {
				ok(c)
				s.read(br) // and close
			}
		})
		c := &Client{}
		ctx := t.Context()
		if err := do(ctx, c, s.ep, "GET"); err != nil {
			t.Fatal(err)
		}
		err := do(ctx, c, s.ep, tt.method)
		var ce *closedError
		switch {
		case tt.resent && err != nil:
			t.Errorf("%s: %v, want it sent again and answered", tt.method, err)
		case !tt.resent && (!errors.As(err, &ce) || !ce.sent):
			t.Errorf("%s: %v, want a closedError after the request was sent", tt.method, err)
		}
		want := int32(2)
		if tt.resent {
			want = 3
		}
		if n := s.requests.Load(); n != want {
			t.Errorf("%s: the server read %d requests, want %d", tt.method, n, want)
		}
		c.CloseIdle()
	}
}

// Only once: a request whose resend fails too is the caller's error.
func TestResentOnce(t *testing.T) {
	var closing atomic.Bool
	s := newRawServer(t, func(s *rawServer, i int, c net.Conn, br *bufio.Reader) {
		for s.read(br) && !closing.Load() {
			ok(c)
		}
	})
	c := &Client{}
	defer c.CloseIdle()
	ctx := t.Context()
	if err := do(ctx, c, s.ep, "GET"); err != nil {
		t.Fatal(err)
	}
	closing.Store(true)
	var ce *closedError
	if err := do(ctx, c, s.ep, "GET"); !errors.As(err, &ce) {
		t.Fatalf("GET: %v, want a closedError", err)
	}
	if n := s.requests.Load(); n != 3 {
		t.Errorf("the server read %d requests, want 3 (one, then one sent twice)", n)
	}
}

// failingConn fails its writes once armed, as a connection the server
// reset does.
type failingConn struct {
	net.Conn
	armed *atomic.Bool
}

func (f failingConn) Write(b []byte) (int, error) {
	if f.armed.Load() {
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}
	}
	return f.Conn.Write(b)
}

// A request whose write fails on a kept connection never reached the
// server: it goes once more, whatever its method.
func TestUnsentResent(t *testing.T) {
	s := newRawServer(t, func(s *rawServer, i int, c net.Conn, br *bufio.Reader) { s.answerAll(c, br) })
	var armed atomic.Bool
	var dials atomic.Int32
	c := &Client{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil || dials.Add(1) > 1 {
			return conn, err
		}
		return failingConn{conn, &armed}, nil // the first only
	}}
	defer c.CloseIdle()
	ctx := t.Context()
	if err := do(ctx, c, s.ep, "POST"); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if err := do(ctx, c, s.ep, "POST"); err != nil {
		t.Fatalf("POST after a failed write: %v", err)
	}
	if n, d := s.requests.Load(), dials.Load(); n != 2 || d != 2 {
		t.Errorf("%d requests over %d connections, want 2 over 2", n, d)
	}
}

// A request on a new connection is never sent twice, even idempotent.
func TestNewConnectionNotResent(t *testing.T) {
	s := newRawServer(t, func(s *rawServer, i int, c net.Conn, br *bufio.Reader) { s.read(br) })
	c := &Client{}
	defer c.CloseIdle()
	var ce *closedError
	if err := do(t.Context(), c, s.ep, "GET"); !errors.As(err, &ce) {
		t.Fatalf("GET: %v, want a closedError", err)
	}
	if n := s.requests.Load(); n != 1 {
		t.Errorf("the server read %d requests, want 1", n)
	}
}

// At most MaxIdle connections wait per host, none past IdleTimeout.
func TestIdleLimits(t *testing.T) {
	s := newRawServer(t, func(s *rawServer, i int, c net.Conn, br *bufio.Reader) { s.answerAll(c, br) })
	c := &Client{}
	defer c.CloseIdle()
	ctx := t.Context()
	var bodies []io.ReadCloser
	for range 3 { // three at once: three connections
		resp, err := c.Do(ctx, s.ep, Request{Method: "GET", Path: "/x"})
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		bodies = append(bodies, resp.Body)
	}
	for _, b := range bodies {
		b.Close()
	}
	if n := idleCount(c, s.ep); n != DefaultMaxIdle {
		t.Fatalf("%d idle connections, want %d", n, DefaultMaxIdle)
	}
	// Age the idle connections past the timeout: the next request dials.
	c.mu.Lock()
	for _, hc := range c.idle[s.ep.HostPort] {
		hc.idleSince = hc.idleSince.Add(-DefaultIdleTimeout - time.Second)
	}
	c.mu.Unlock()
	if err := do(ctx, c, s.ep, "GET"); err != nil {
		t.Fatal(err)
	}
	if n := s.conns.Load(); n != 4 {
		t.Errorf("%d connections, want 4: the expired ones not reused", n)
	}
	if n := idleCount(c, s.ep); n != 1 {
		t.Errorf("%d idle connections, want the new one only", n)
	}
}

// waitPending waits until bytes (or the close) from the peer wait on
// hc's TCP connection, without reading them.
func waitPending(t *testing.T, hc *conn) {
	t.Helper()
	rc, err := hc.probe.Conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		pending := false
		rc.Read(func(fd uintptr) bool {
			var b [1]byte
			_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			pending = !errors.Is(err, unix.EAGAIN)
			return true
		})
		if pending {
			return
		}
	}
	t.Fatal("nothing arrived from the server")
}

// tlsServer is a TLS 1.3 server; one that asks for a client certificate
// sends its session tickets after the client's last flight (not with
// its own), so they arrive once the client's handshake is over.
func tlsServer(t *testing.T, askCert bool) (*httptest.Server, *Client, Endpoint, *atomic.Int32) {
	t.Helper()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") }))
	if askCert {
		srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	// A session cache: a Go server sends tickets only to a client that
	// can resume.
	c := &Client{TLSConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13,
		ClientSessionCache: tls.NewLRUClientSessionCache(1)}}
	t.Cleanup(c.CloseIdle)
	ep, err := ParseEndpoint(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return srv, c, ep, &conns
}

// A TLS server closing an idle connection sends close_notify, then its
// FIN: bytes wait on the socket, and the connection is dead. The next
// request goes on a new connection without an error, even a POST.
func TestTLSIdleClosed(t *testing.T) {
	srv, c, ep, conns := tlsServer(t, false)
	ctx := t.Context()
	if err := do(ctx, c, ep, "POST"); err != nil {
		t.Fatal(err)
	}
	srv.CloseClientConnections()
	c.mu.Lock()
	hc := c.idle[ep.HostPort][0]
	c.mu.Unlock()
	waitPending(t, hc)
	if err := do(ctx, c, ep, "POST"); err != nil {
		t.Fatalf("POST after the server closed the idle connection: %v", err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

// Records without data waiting on an idle TLS connection (TLS 1.3's
// session tickets, here sent after the client's handshake) do not make
// it dead: the check consumes them and keeps the connection.
func TestTLSIdleTicketsAlive(t *testing.T) {
	_, c, ep, conns := tlsServer(t, true)
	hc, err := c.dial(t.Context(), ep)
	if err != nil {
		t.Fatal(err)
	}
	waitPending(t, hc) // the tickets
	if !hc.alive() {
		t.Fatal("a fresh TLS connection with its session tickets waiting is not alive")
	}
	c.put(ep, hc)
	if err := do(t.Context(), c, ep, "GET"); err != nil {
		t.Fatal(err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections, want the checked one reused", n)
	}
}
