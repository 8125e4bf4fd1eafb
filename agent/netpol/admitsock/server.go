package admitsock

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/podnet/podnet/internal/unixsock"
	"github.com/podnet/podnet/internal/wire"
)

// Handler decides for one pod: whether a NetworkPolicy selects it, once
// its rules are in place, or why that could not be done before ctx
// ended.
type Handler func(ctx context.Context, p Pod) (selected bool, err error)

// Options configure Serve.
type Options struct {
	// MaxWait bounds a request without a deadline, or with a later one
	// (default DefaultMaxWait).
	MaxWait time.Duration
	// ReadTimeout bounds the wait for a connection's request (default
	// DefaultReadTimeout).
	ReadTimeout time.Duration
}

// Defaults of Options.
const (
	DefaultMaxWait     = 30 * time.Second
	DefaultReadTimeout = 5 * time.Second
)

// Listen creates the socket at path, mode 0600, replacing a stale one
// (internal/unixsock).
func Listen(path string) (net.Listener, error) {
	l, err := unixsock.Listen(path)
	if err != nil {
		return nil, fmt.Errorf("policy handshake %w", err)
	}
	return l, nil
}

// Serve answers the requests of connections accepted on l with h until
// ctx ends, then closes l and every connection and waits for the
// handlers in flight. It returns nil after ctx ended, or the error that
// stopped accepting.
func Serve(ctx context.Context, l net.Listener, h Handler, o Options) error {
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			l.Close()
			return fmt.Errorf("policy handshake: accept: %w", err)
		}
		wg.Go(func() {
			defer c.Close()
			closeOnStop := context.AfterFunc(ctx, func() { c.Close() })
			defer closeOnStop()
			serveConn(ctx, c, h, o)
		})
	}
}

// serveConn answers c's one request.
func serveConn(ctx context.Context, c net.Conn, h Handler, o Options) {
	_ = c.SetReadDeadline(time.Now().Add(o.ReadTimeout))
	frame, err := wire.ReadFrame(c, nil, maxRequest)
	if err != nil {
		return
	}
	req, err := decodeRequest(frame)
	var answer []byte
	switch {
	case err != nil:
		answer = encodeAnswer(statusFailed, fmt.Sprintf("policy agent: undecodable request: %v", err))
	case req.version != version:
		answer = encodeAnswer(statusUnsupported, fmt.Sprintf("policy agent: request of protocol version %d, this agent speaks %d (plugin and agent of different podnet versions)", req.version, version))
	default:
		answer = decide(ctx, req, h, o.MaxWait)
	}
	_ = c.SetWriteDeadline(time.Now().Add(o.ReadTimeout))
	_, _ = c.Write(answer)
}

func decide(ctx context.Context, req request, h Handler, maxWait time.Duration) []byte {
	dl := time.Now().Add(maxWait)
	if req.deadline != 0 {
		if d := time.Unix(0, req.deadline); d.Before(dl) {
			dl = d
		}
	}
	ctx, cancel := context.WithDeadline(ctx, dl)
	defer cancel()
	selected, err := h(ctx, req.pod)
	switch {
	case err != nil:
		return encodeAnswer(statusFailed, err.Error())
	case selected:
		return encodeAnswer(statusSelected, "")
	}
	return encodeAnswer(statusNotSelected, "")
}
