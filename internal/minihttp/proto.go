package minihttp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// head is a response's status line and headers.
type head struct {
	status  int
	length  int64 // -1 without Content-Length
	chunked bool
	keep    bool
	header  [][2]string
}

// Bounds on what a server can make a client read and hold before a body
// (or in a chunked body's framing): far above what an API server or an
// etcd gateway sends, far below what would hurt a plugin.
const (
	maxLine    = 16 << 10 // bytes of a status, header, chunk size or trailer line, CR LF included
	maxHeaders = 100      // header lines of a response, or trailer lines of a chunked body
	maxInterim = 10       // 1xx responses before the final one
)

// errHeaderLimit is a response that passed one of the bounds above.
var errHeaderLimit = errors.New("response over minihttp's header limits")

// readHead reads the status line and headers, skipping 1xx responses.
func readHead(br *bufio.Reader) (head, error) {
	for interim := 0; ; interim++ {
		if interim > maxInterim {
			return head{}, fmt.Errorf("%w: more than %d interim (1xx) responses", errHeaderLimit, maxInterim)
		}
		line, err := readLine(br)
		if err != nil {
			return head{}, err
		}
		proto, rest, _ := strings.Cut(line, " ")
		code, _, _ := strings.Cut(rest, " ")
		status, err := strconv.Atoi(code)
		if !strings.HasPrefix(proto, "HTTP/1.") || err != nil || status < 100 {
			return head{}, fmt.Errorf("malformed HTTP status line %q", line)
		}
		h := head{status: status, length: -1, keep: proto == "HTTP/1.1"}
		if err := h.readHeaders(br); err != nil {
			return head{}, err
		}
		if status >= 200 {
			return h, nil
		}
		// 1xx: an interim response; the real one follows.
	}
}

func (h *head) readHeaders(br *bufio.Reader) error {
	for {
		line, err := readLine(br)
		if err != nil {
			return err
		}
		if line == "" {
			return nil
		}
		if len(h.header) == maxHeaders {
			return fmt.Errorf("%w: more than %d header lines", errHeaderLimit, maxHeaders)
		}
		name, value, _ := strings.Cut(line, ":")
		name, value = strings.ToLower(name), strings.TrimSpace(value)
		h.header = append(h.header, [2]string{name, value})
		switch name {
		case "content-length":
			if h.length, err = strconv.ParseInt(value, 10, 64); err != nil || h.length < 0 {
				return fmt.Errorf("malformed Content-Length %q", value)
			}
		case "transfer-encoding":
			h.chunked = strings.EqualFold(value, "chunked")
		case "connection":
			if strings.EqualFold(value, "close") {
				h.keep = false
			}
		}
	}
}

// bodyReader is what reads the body that follows h on br, and whether
// the connection can carry another request once it is read.
func (h head) bodyReader(br *bufio.Reader) (io.Reader, bool) {
	switch {
	case h.status == 204 || h.status == 304:
		return io.LimitReader(br, 0), h.keep // no body, whatever the headers say
	case h.chunked:
		return &chunkedReader{br: br}, h.keep
	case h.length >= 0:
		return io.LimitReader(br, h.length), h.keep
	default:
		return br, false // until the server closes
	}
}

// readLine reads a line of at most maxLine bytes and returns it without
// its line end.
func readLine(br *bufio.Reader) (string, error) {
	var long []byte // a line longer than br's buffer, so far
	for {
		frag, err := br.ReadSlice('\n')
		if len(long)+len(frag) > maxLine {
			return "", fmt.Errorf("%w: a line longer than %d bytes", errHeaderLimit, maxLine)
		}
		switch {
		case err == nil:
			if long != nil {
				frag = append(long, frag...)
			}
			return strings.TrimRight(string(frag), "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			long = append(long, frag...)
		default:
			if errors.Is(err, io.EOF) && len(long)+len(frag) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
	}
}

// body hands the connection back once read to the end.
type body struct {
	c    *Client
	ep   Endpoint
	hc   *conn
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
		n, err := c.nextChunk()
		if err != nil {
			return 0, err
		}
		if n == 0 {
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

// nextChunk reads a chunk's size line; after the last (size 0) chunk, it
// reads the trailers up to the empty line.
func (c *chunkedReader) nextChunk() (int64, error) {
	line, err := readLine(c.br)
	if err != nil {
		return 0, noEOF(err)
	}
	size, _, _ := strings.Cut(line, ";")
	n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("malformed chunk size %q", line)
	}
	for trailers := 0; n == 0; trailers++ {
		if trailers > maxHeaders {
			return 0, fmt.Errorf("%w: more than %d trailer lines", errHeaderLimit, maxHeaders)
		}
		t, err := readLine(c.br)
		if err != nil {
			return 0, noEOF(err)
		}
		if t == "" {
			break
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
