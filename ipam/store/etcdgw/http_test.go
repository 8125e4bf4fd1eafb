package etcdgw

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
	status, length, chunked, keep, err := readHead(br)
	if err != nil || status != 200 || length != 2 || chunked || !keep {
		t.Fatalf("got %d %d %v %v %v", status, length, chunked, keep, err)
	}
	for _, bad := range []string{"", "SPDY/3 200 OK\r\n\r\n", "HTTP/1.1 abc OK\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-"} {
		if _, _, _, _, err := readHead(bufio.NewReader(strings.NewReader(bad))); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	_, _, chunked, keep, _ = readHead(bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")))
	if !chunked || keep {
		t.Errorf("chunked %v keep %v", chunked, keep)
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
func serve(t *testing.T, perConn int, announce bool, body string) (endpoint, *atomic.Int32) {
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
	ep, err := parseEndpoint("http://" + l.Addr().String())
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
func waitClosed(t *testing.T, c *httpClient, ep endpoint) {
	t.Helper()
	c.mu.Lock()
	idle := slices.Clone(c.idle[ep.hostPort])
	c.mu.Unlock()
	for _, hc := range idle {
		hc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := hc.br.Peek(1); !errors.Is(err, io.EOF) {
			t.Fatalf("idle connection: %v, want the server's close (EOF)", err)
		}
		hc.SetReadDeadline(time.Time{})
	}
}

func post(t *testing.T, c *httpClient, ep endpoint) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.post(ctx, ep, "/v3/kv/range", nil, []byte(`{"key":"eA=="}`), false)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.body.Close()
	b, err := io.ReadAll(resp.body)
	if err != nil || resp.status != 200 {
		t.Fatalf("%d %v", resp.status, err)
	}
	return string(b)
}

// A connection is kept and reused; one the server announced it closes,
// or closed while it was idle, is replaced without an error.
func TestConnectionReuse(t *testing.T) {
	for _, announce := range []bool{true, false} {
		c := &httpClient{dialTimeout: time.Second}
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
		c.closeIdle()
	}
}

func TestParseEndpoint(t *testing.T) {
	ep, err := parseEndpoint("https://10.0.0.1:2379")
	if err != nil || !ep.tls || ep.hostPort != "10.0.0.1:2379" || ep.host != "10.0.0.1" {
		t.Fatalf("%+v %v", ep, err)
	}
	if ep, err := parseEndpoint("http://[fd00::1]"); err != nil || ep.hostPort != "[fd00::1]:80" {
		t.Fatalf("%+v %v", ep, err)
	}
	for _, bad := range []string{"ftp://x:1", "http://:2379", "http://x:2379/prefix"} {
		if _, err := parseEndpoint(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
