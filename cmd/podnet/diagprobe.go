package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/connectivity"
)

// peerAnswer is `diag serve`'s answer on /peer and over UDP.
type peerAnswer struct {
	Peer string `json:"peer"`
}

func serveUDP(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		_, addr, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		b, _ := json.Marshal(peerAnswer{Peer: addr.String()})
		_, _ = pc.WriteTo(b, addr)
	}
}

// newDiagProbeCommand is the prober of `podnet connectivity test`: one
// probe, retried until the expected outcome or --retry-for, then one
// JSON line (connectivity.ProbeResult) on stdout. It exits 0 whatever
// the outcome: the caller judges.
func newDiagProbeCommand() *cobra.Command {
	var (
		kind, expect      string
		output            string
		timeout, retryFor time.Duration
	)
	cmd := &cobra.Command{
		Use:   "probe TARGET",
		Short: "Probe a target once or until the expected outcome, and print the result as JSON",
		Long: `Probe TARGET and print one JSON line: reached or not, the attempts, the
address the server saw (http, udp: a 'podnet diag serve' at ADDRESS:PORT),
the answer (dns: TARGET is a name), this pod's addresses and the last
error. --kind tcp only connects. With --retry-for it tries again every
half second until the outcome is --expect (reach or blocked).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if expect != "reach" && expect != "blocked" {
				return fmt.Errorf("--expect %q: want reach or blocked", expect)
			}
			probe, ok := probes[connectivity.Kind(kind)]
			if !ok {
				return fmt.Errorf("--kind %q: want http, udp, tcp or dns", kind)
			}
			var res connectivity.ProbeResult
			start := time.Now()
			deadline := start.Add(retryFor)
			for {
				res.Attempts++
				res.Peer, res.Addrs, res.Error = "", nil, ""
				err := probe(cmd.Context(), args[0], timeout, &res)
				res.Reached = err == nil
				if err != nil {
					res.Error = err.Error()
				}
				if res.Reached == (expect == "reach") || !time.Now().Before(deadline) || cmd.Context().Err() != nil {
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
			res.Self = localAddrs()
			res.Millis = time.Since(start).Milliseconds()
			return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kind, "kind", "http", "http, udp, tcp or dns")
	f.StringVar(&expect, "expect", "reach", "reach or blocked: the outcome that ends the retries")
	f.DurationVar(&timeout, "timeout", 2*time.Second, "give up on one attempt after this long")
	f.DurationVar(&retryFor, "retry-for", 0, "retry until the expected outcome for this long")
	// Always JSON (one line, connectivity.ProbeResult): -o json is
	// accepted so that every command a script calls takes it.
	addOutputFlag(cmd, &output, outputJSON)
	return cmd
}

var probes = map[connectivity.Kind]func(ctx context.Context, target string, timeout time.Duration, res *connectivity.ProbeResult) error{
	connectivity.KindHTTP: probeHTTP,
	connectivity.KindUDP:  probeUDP,
	connectivity.KindTCP: func(ctx context.Context, target string, timeout time.Duration, _ *connectivity.ProbeResult) error {
		d := net.Dialer{Timeout: timeout}
		c, err := d.DialContext(ctx, "tcp", target)
		if err != nil {
			return err
		}
		return c.Close()
	},
	connectivity.KindDNS: func(ctx context.Context, target string, timeout time.Duration, res *connectivity.ProbeResult) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, target)
		res.Addrs = addrs
		return err
	},
}

func probeHTTP(ctx context.Context, target string, timeout time.Duration, res *connectivity.ProbeResult) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+target+"/peer", nil)
	if err != nil {
		return err
	}
	// A new connection per attempt: a kept-alive one would outlive the
	// policy or route the next attempt is meant to meet.
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("http://%s/peer: %s", target, resp.Status)
	}
	var a peerAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return fmt.Errorf("http://%s/peer: %w", target, err)
	}
	res.Peer = a.Peer
	return nil
}

func probeUDP(ctx context.Context, target string, timeout time.Duration, res *connectivity.ProbeResult) error {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "udp", target)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("peer?")); err != nil {
		return err
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("udp %s: no answer in %s", target, timeout)
		}
		return err
	}
	var a peerAnswer
	if err := json.Unmarshal(buf[:n], &a); err != nil {
		return fmt.Errorf("udp %s: %w", target, err)
	}
	res.Peer = a.Peer
	return nil
}
