// Package sockserve keeps one of the agent's unix sockets for the node's
// plugins (the IPAM store's, the policy handshake's) served: it listens,
// serves until the server stops, and listens again with backoff, giving
// up when the socket cannot be made for a while, so that the agent ends
// and is restarted rather than serve nothing. What is served, and how
// the socket is made, are the caller's.
package sockserve

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Loop describes one socket.
type Loop struct {
	Path string
	// What names the socket's service in the log ("the plugins' IPAM
	// store").
	What string
	// Listen makes the listener at Path (its directory exists by then).
	Listen func(path string) (net.Listener, error)
	// Serve serves l until ctx ends or the server fails.
	Serve func(ctx context.Context, l net.Listener) error
	// Ready and NotReady report the socket's state to the service's
	// readiness.
	Ready    func()
	NotReady func(error)
	// GiveUp is how long the socket may fail to be made before Run
	// returns an error.
	GiveUp time.Duration
	Logger *slog.Logger
}

// Run serves until ctx ends (nil) or the socket cannot be made for
// GiveUp (an error naming it).
func (lp Loop) Run(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	var failingSince time.Time
	for {
		l, err := lp.listen()
		if err == nil {
			lp.Ready()
			lp.Logger.Info("serving "+lp.What, "path", lp.Path)
			err = lp.Serve(ctx, l)
			if ctx.Err() != nil {
				return nil
			}
			lp.Logger.Error("socket of "+lp.What+" stopped; listening again", "path", lp.Path, "err", err)
			failingSince, backoff = time.Time{}, 100*time.Millisecond
		} else {
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			if time.Since(failingSince) >= lp.GiveUp {
				return fmt.Errorf("socket %s: cannot listen for %v: %w", lp.Path, lp.GiveUp, err)
			}
			lp.Logger.Error("socket of "+lp.What, "path", lp.Path, "err", err, "retry_in", backoff)
		}
		lp.NotReady(fmt.Errorf("socket %s not listening: %w", lp.Path, err))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (lp Loop) listen() (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(lp.Path), 0o755); err != nil {
		return nil, err
	}
	return lp.Listen(lp.Path)
}
