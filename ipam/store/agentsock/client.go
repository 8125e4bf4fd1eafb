package agentsock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/podnet/podnet/internal/wire"
	"github.com/podnet/podnet/ipam"
)

// SpecPrefix starts a store spec naming the agent's socket:
// "agent:/run/podnet/ipam.sock".
const SpecPrefix = "agent:"

// DefaultSocket is where the agent serves the store.
const DefaultSocket = "/run/podnet/ipam.sock"

// ParseSpec returns the socket path of an "agent:PATH" store spec.
func ParseSpec(spec string) (string, bool) {
	path, ok := strings.CutPrefix(spec, SpecPrefix)
	return path, ok && path != ""
}

// DefaultDialTimeout bounds connecting to the socket: a local agent
// answers in microseconds or not at all.
const DefaultDialTimeout = time.Second

// ClientOptions configure a Client.
type ClientOptions struct {
	// DialTimeout defaults to DefaultDialTimeout.
	DialTimeout time.Duration
}

// Client is an ipam.Store whose calls the agent serves. It keeps the
// connection it opened for later calls until Close; concurrent calls
// open more.
type Client struct {
	path        string
	dialTimeout time.Duration

	mu     sync.Mutex
	idle   []*clientConn
	closed bool
}

var _ ipam.Store = (*Client)(nil)

// clientConn is one connection and its buffers.
type clientConn struct {
	c   net.Conn
	r   *bufio.Reader
	out []byte
	in  []byte
	// spoiled: a cancellation raced the answer; close, do not keep.
	spoiled bool
}

// Open returns a client of the socket at path. It connects on the first
// call, so an absent agent is an ErrUnavailable of that call.
func Open(path string, o ClientOptions) (*Client, error) {
	if path == "" {
		return nil, errors.New("agent store: no socket path")
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	return &Client{path: path, dialTimeout: o.DialTimeout}, nil
}

// Close implements ipam.Store: it closes the kept connections.
func (c *Client) Close() error {
	c.mu.Lock()
	idle := c.idle
	c.idle, c.closed = nil, true
	c.mu.Unlock()
	for _, cc := range idle {
		cc.c.Close()
	}
	return nil
}

// Get implements ipam.Store. ipam.FreshRead(ctx) makes the agent read its
// backend instead of its cache.
func (c *Client) Get(ctx context.Context, key string) (ipam.KV, error) {
	r := request{op: opGet, key: key}
	if ipam.IsFreshRead(ctx) {
		r.flags |= flagFresh
	}
	var kv ipam.KV
	err := c.call(ctx, r, func(d *wire.Dec) { kv = getKV(d) })
	return kv, err
}

// List implements ipam.Store. The agent reads its backend, except for
// the prefixes it caches (Options.CachedLists: the pools'), whose answer
// may be up to the ListTTL old; ipam.FreshRead makes it read the backend
// for those too.
func (c *Client) List(ctx context.Context, prefix string) ([]ipam.KV, error) {
	r := request{op: opList, key: prefix}
	if ipam.IsFreshRead(ctx) {
		r.flags |= flagFresh
	}
	var kvs []ipam.KV
	err := c.call(ctx, r, func(d *wire.Dec) {
		n := d.U32()
		if n > len(d.B)/16 { // each kv is at least 16 bytes
			d.Err = wire.ErrShort
			return
		}
		kvs = make([]ipam.KV, 0, n)
		for range n {
			kvs = append(kvs, getKV(d))
		}
	})
	return kvs, err
}

// Write implements ipam.Store. It is sent once: an answer lost on the way
// back is ErrUnavailable, and the write may have been applied.
func (c *Client) Write(ctx context.Context, w ipam.Write) (int64, error) {
	r := request{op: opWrite, key: w.Key, modRev: w.ModRevision, value: w.Value}
	if w.Delete {
		r.flags |= flagDelete
	}
	var rev int64
	err := c.call(ctx, r, func(d *wire.Dec) { rev = d.I64() })
	return rev, err
}

// call sends r and decodes a successful answer with result. A read that
// fails on a kept connection (the agent restarted since) is sent once
// more on a new one; a write is not.
func (c *Client) call(ctx context.Context, r request, result func(*wire.Dec)) error {
	if err := ctx.Err(); err != nil {
		return c.unavailable(r, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		r.deadline = dl.UnixNano()
	}
	for attempt := 0; ; attempt++ {
		cc, kept, err := c.conn(ctx)
		if err != nil {
			return c.unavailable(r, err)
		}
		answer, err := cc.roundTrip(ctx, r)
		if err != nil {
			cc.c.Close()
			if kept && attempt == 0 && r.op != opWrite && ctx.Err() == nil {
				continue
			}
			return c.unavailable(r, err)
		}
		err = c.decode(r, answer, result)
		c.release(cc)
		return err
	}
}

// decode turns an answer into the call's result or error.
func (c *Client) decode(r request, answer []byte, result func(*wire.Dec)) error {
	d := wire.Dec{B: answer}
	status := d.U8()
	if status != statusOK {
		msg := string(d.Bytes32())
		if err := d.Done(); err != nil {
			return fmt.Errorf("agent store %s: %s: undecodable answer: %v", c.path, describe(r), err)
		}
		return &remoteError{msg: msg, kind: statusErrors[status]}
	}
	result(&d)
	if err := d.Done(); err != nil {
		return fmt.Errorf("agent store %s: %s: undecodable answer: %v", c.path, describe(r), err)
	}
	return nil
}

func (c *Client) unavailable(r request, err error) error {
	return fmt.Errorf("agent store %s: %s: %v: %w", c.path, describe(r), err, ipam.ErrUnavailable)
}

// describe names a request in errors.
func describe(r request) string {
	switch r.op {
	case opGet:
		return "get " + r.key
	case opList:
		return "list " + r.key
	}
	return "write " + r.key
}

// conn returns a kept connection (kept true) or a new one.
func (c *Client) conn(ctx context.Context) (cc *clientConn, kept bool, err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, false, errors.New("store closed")
	}
	if n := len(c.idle); n > 0 {
		cc = c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		return cc, true, nil
	}
	c.mu.Unlock()
	d := net.Dialer{Timeout: c.dialTimeout}
	conn, err := d.DialContext(ctx, "unix", c.path)
	if err != nil {
		return nil, false, err
	}
	return &clientConn{c: conn, r: bufio.NewReaderSize(conn, 32<<10)}, false, nil
}

// release keeps cc for the next call, or closes it once the client is.
func (c *Client) release(cc *clientConn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || cc.spoiled {
		cc.c.Close()
		return
	}
	c.idle = append(c.idle, cc)
}

// roundTrip sends r and reads its answer within ctx: its deadline is the
// connection's, and its cancellation ends the wait.
func (cc *clientConn) roundTrip(ctx context.Context, r request) ([]byte, error) {
	dl, _ := ctx.Deadline()
	if err := cc.c.SetDeadline(dl); err != nil {
		return nil, err
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { cc.c.SetDeadline(time.Unix(1, 0)) })
		defer func() {
			// Once started, the func may still set the deadline after
			// the next call's: the connection is not reused.
			if !stop() {
				cc.spoiled = true
			}
		}()
	}
	cc.out = encodeRequest(cc.out, r)
	if _, err := cc.c.Write(cc.out); err != nil {
		return nil, cause(ctx, err)
	}
	answer, err := wire.ReadFrame(cc.r, cc.in, maxAnswer)
	if err != nil {
		return nil, cause(ctx, err)
	}
	cc.in = answer
	return answer, nil
}

// cause prefers the context's error to the timeout it caused (the
// connection's deadline may fire a moment before the context's).
func cause(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if _, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}
