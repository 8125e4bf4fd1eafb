package interop

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/podnet/podnet/netns"
)

// crrPort is where connectRate's server listens.
const crrPort = 5301

// connectRate measures p's connections per second for secs seconds: one
// client in p's client namespace opens a TCP connection to p's server
// address, sends a byte, reads the server's byte and closes, again and
// again, as netperf's TCP_CRR does. The first packets of a connection
// are what conntrack and policy look at; the steady state of one
// connection (sockperf) never shows them.
//
// The client closes with a reset (SO_LINGER 0), so that no TIME_WAIT
// holds its ports: thousands of connections a second would run out of
// ephemeral ports within a few rounds.
func connectRate(p *dpPath, secs int) (float64, error) {
	var ln net.Listener
	if err := netns.Do(p.server, func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(p.addr, crrPort).String())
		return err
	}); err != nil {
		return 0, fmt.Errorf("listen in the server namespace: %w", err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				b := make([]byte, 1)
				if _, err := io.ReadFull(c, b); err == nil {
					_, _ = c.Write(b)
				}
			}()
		}
	}()
	defer func() {
		ln.Close()
		wg.Wait()
	}()

	var n int
	start := time.Now()
	err := netns.Do(p.client, func() error {
		// Dial makes its socket on this goroutine, whose thread netns.Do
		// keeps in the client namespace until the loop ends.
		d := net.Dialer{Timeout: 2 * time.Second}
		addr := netip.AddrPortFrom(p.addr, crrPort).String()
		b := []byte{1}
		end := start.Add(time.Duration(secs) * time.Second)
		for time.Now().Before(end) {
			c, err := d.Dial("tcp", addr)
			if err != nil {
				return err
			}
			_, err = c.Write(b)
			if err == nil {
				_, err = io.ReadFull(c, b)
			}
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("after %d connections: %w", n, err)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
