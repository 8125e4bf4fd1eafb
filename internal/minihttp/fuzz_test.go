package minihttp

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"testing"
)

// FuzzReadResponse feeds the response parser what a server, or anyone
// between it and the plugin, could send: the status line, headers and
// body framing are read exactly as roundTrip reads them (readHead, then
// head.bodyReader). A small bufio buffer makes long lines take the
// multi-fragment path. Whatever the bytes, the parser must not panic,
// must keep to its bounds, and must not read a Content-Length body past
// its length.
func FuzzReadResponse(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nTrailer: 1\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 404 Not Found\r\nConnection: close\r\n\r\ngone",
		"HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n",
		"HTTP/1.1 200 OK\r\n" + strings.Repeat("X: y\r\n", 101) + "\r\n",
		"HTTP/1.1 200 " + strings.Repeat("a", maxLine) + "\r\n\r\n",
		"HTTP/2 200\r\n\r\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(data), 64)
		h, err := readHead(br)
		if err != nil {
			return
		}
		if h.status < 200 {
			t.Fatalf("an interim status %d returned as the response", h.status)
		}
		if len(h.header) > maxHeaders {
			t.Fatalf("%d header lines kept, more than %d", len(h.header), maxHeaders)
		}
		for _, kv := range h.header {
			if len(kv[0])+len(kv[1]) > maxLine {
				t.Fatalf("a header of %d bytes kept, the line limit is %d", len(kv[0])+len(kv[1]), maxLine)
			}
		}
		r, _ := h.bodyReader(br)
		body, _ := io.ReadAll(io.LimitReader(r, int64(len(data))+1))
		if int64(len(body)) > int64(len(data)) {
			t.Fatalf("read %d body bytes from %d bytes of input", len(body), len(data))
		}
		if h.length >= 0 && !h.chunked && int64(len(body)) > h.length {
			t.Fatalf("read %d body bytes past Content-Length %d", len(body), h.length)
		}
	})
}
