package minihttp

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestReadHead(t *testing.T) {
	in := "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	br := bufio.NewReader(strings.NewReader(in))
	h, err := readHead(br)
	if err != nil || h.status != 200 || h.length != 2 || h.chunked || !h.keep {
		t.Fatalf("got %+v %v", h, err)
	}
	if got := (&Response{Header: h.header}).Get("CONTENT-TYPE"); got != "application/json" {
		t.Errorf("Content-Type %q", got)
	}
	for _, bad := range []string{"", "SPDY/3 200 OK\r\n\r\n", "HTTP/1.1 abc OK\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-"} {
		if _, err := readHead(bufio.NewReader(strings.NewReader(bad))); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	h, _ = readHead(bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")))
	if !h.chunked || h.keep {
		t.Errorf("chunked %v keep %v", h.chunked, h.keep)
	}
}

func TestChunkedReader(t *testing.T) {
	in := "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: x\r\n\r\nNEXT"
	br := bufio.NewReader(strings.NewReader(in))
	got, err := io.ReadAll(&chunkedReader{br: br})
	if err != nil || string(got) != "hello, world" {
		t.Fatalf("%q %v", got, err)
	}
	if rest, _ := io.ReadAll(br); string(rest) != "NEXT" {
		t.Errorf("read past the body: left %q", rest)
	}
	for _, bad := range []string{"5\r\nhel", "x\r\n", "5\r\nhelloXX", "5\r\nhello\r\n"} {
		if _, err := io.ReadAll(&chunkedReader{br: bufio.NewReader(strings.NewReader(bad))}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// serve answers each connection's requests with body, closing the
// connection after perConn answers, saying so in the last answer when
// announce is set; it counts connections.
func serve(t *testing.T, perConn int, announce bool, body string) (Endpoint, *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var conns atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go answer(c, perConn, announce, body)
		}
	}()
	ep, err := ParseEndpoint("http://" + l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return ep, &conns
}

// answer answers perConn requests on c with body, then closes c.
func answer(c net.Conn, perConn int, announce bool, body string) {
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range perConn {
		if skipRequest(br) != nil {
			return
		}
		closing := ""
		if announce && i == perConn-1 {
			closing = "Connection: close\r\n"
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\n"+closing+"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	}
}

// skipRequest reads one request, head and body.
func skipRequest(br *bufio.Reader) error {
	n := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
			n, _ = strconv.Atoi(strings.TrimSpace(v))
		}
		if line == "\r\n" {
			break
		}
	}
	_, err := io.CopyN(io.Discard, br, int64(n))
	return err
}

// waitClosed blocks until the close of every idle connection of c to ep
// has arrived: a read that ends in EOF. Nothing is read, since a closed
// connection has nothing to give.
func waitClosed(t *testing.T, c *Client, ep Endpoint) {
	t.Helper()
	c.mu.Lock()
	idle := slices.Clone(c.idle[ep.HostPort])
	c.mu.Unlock()
	for _, hc := range idle {
		hc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := hc.br.Peek(1); !errors.Is(err, io.EOF) {
			t.Fatalf("idle connection: %v, want the server's close (EOF)", err)
		}
		hc.SetReadDeadline(time.Time{})
	}
}

func post(t *testing.T, c *Client, ep Endpoint) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Do(ctx, ep, Request{Path: "/v3/kv/range", ContentType: "application/json", Body: []byte(`{"key":"eA=="}`)})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.Status != 200 {
		t.Fatalf("%d %v", resp.Status, err)
	}
	return string(b)
}

// A connection is kept and reused; one the server announced it closes,
// or closed while it was idle, is replaced without an error.
func TestConnectionReuse(t *testing.T) {
	for _, announce := range []bool{true, false} {
		c := &Client{DialTimeout: time.Second}
		ep, conns := serve(t, 3, announce, `{"ok":true}`)
		for i := range 7 {
			if !announce && i%3 == 0 && i > 0 {
				waitClosed(t, c, ep) // the unannounced close has arrived
			}
			if got := post(t, c, ep); got != `{"ok":true}` {
				t.Fatalf("announce=%v: answer %d: %q", announce, i, got)
			}
		}
		if n := conns.Load(); n != 3 {
			t.Errorf("announce=%v: %d connections for 7 requests at 3 per connection, want 3", announce, n)
		}
		c.CloseIdle()
	}
}

func TestParseEndpoint(t *testing.T) {
	ep, err := ParseEndpoint("https://10.0.0.1:2379")
	if err != nil || !ep.TLS || ep.HostPort != "10.0.0.1:2379" || ep.Host != "10.0.0.1" || ep.Path != "" {
		t.Fatalf("%+v %v", ep, err)
	}
	if ep, err := ParseEndpoint("http://[fd00::1]"); err != nil || ep.HostPort != "[fd00::1]:80" {
		t.Fatalf("%+v %v", ep, err)
	}
	if ep, err := ParseEndpoint("https://api.example:6443/k8s/clusters/c1/"); err != nil || ep.Path != "/k8s/clusters/c1" {
		t.Fatalf("%+v %v", ep, err)
	}
	for _, bad := range []string{"ftp://x:1", "http://:2379", "http://x:2379/p?q=1", "https://u:p@x"} {
		if _, err := ParseEndpoint(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestRequestEncode(t *testing.T) {
	ep := Endpoint{HostPort: "h:1", Path: "/base"}
	for _, tt := range []struct {
		r    Request
		want string
	}{
		{Request{Method: "GET", Path: "/x?a=1", Header: [][2]string{{"Accept", "application/json"}}},
			"GET /base/x?a=1 HTTP/1.1\r\nHost: h:1\r\nAccept: application/json\r\n\r\n"},
		{Request{Path: "/y", ContentType: "application/json", Body: []byte("{}")},
			"POST /base/y HTTP/1.1\r\nHost: h:1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"},
		{Request{Method: "PUT", Path: "/z"}, "PUT /base/z HTTP/1.1\r\nHost: h:1\r\nContent-Length: 0\r\n\r\n"},
	} {
		if got := tt.r.encode(ep); got != tt.want {
			t.Errorf("encode(%+v) =\n%q, want\n%q", tt.r, got, tt.want)
		}
	}
}
