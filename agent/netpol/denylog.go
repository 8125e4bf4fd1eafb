package netpol

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/podnet/podnet/dataplane/nflog"
	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/policy"
)

// logSource is what the deny log reads: nflog.Conn.
type logSource interface {
	Receive() ([]nflog.Record, error)
	Close() error
}

// openDenyLog binds the deny log's NFLOG group in the node's namespace.
func (s *Service) openDenyLog() (logSource, error) {
	var c *nflog.Conn
	open := func() (err error) {
		c, err = nflog.Listen(s.cfg.DenyLog.Group)
		return err
	}
	if err := s.inNodeNS(open); err != nil {
		return nil, err
	}
	return c, nil
}

// startDenyLog writes one log line per record of src until src is
// closed; stop closes it and waits.
func (s *Service) startDenyLog(src logSource) (stop func()) {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			recs, err := src.Receive()
			if errors.Is(err, nflog.ErrLost) {
				s.m.denyLogLost.Inc()
				continue
			}
			if err != nil {
				return // closed
			}
			for _, r := range recs {
				s.logDenied(r)
			}
		}
	})
	return func() {
		src.Close()
		wg.Wait()
	}
}

// logDenied writes the record of one denied packet: the pod and the
// direction from its prefix, or, when the pod's name did not fit in it,
// from the packet's address (the destination for ingress, the source for
// egress) in the last applied policy.
func (s *Service) logDenied(r nflog.Record) {
	pod, dir, ok := policyrules.ParseLogPrefix(r.Prefix)
	if !ok {
		return // another writer's record in our group
	}
	if pod == (policy.PodKey{}) {
		addr := r.Dst
		if dir == policyrules.Egress {
			addr = r.Src
		}
		pod = s.localPodOf(addr)
	}
	s.m.denyLogged.Inc()
	attrs := []slog.Attr{
		slog.String("pod", pod.String()), slog.String("direction", dir.String()),
		slog.String("src", r.Src.String()), slog.String("dst", r.Dst.String()),
		slog.String("protocol", protocolName(r.Protocol)),
	}
	if r.DstPort != 0 {
		attrs = append(attrs, slog.Int("port", int(r.DstPort)))
	}
	s.log.LogAttrs(context.Background(), slog.LevelInfo, "packet denied by network policy", attrs...)
}

// localPodOf is the pod of this node with address a in the last applied
// policy, or the zero key.
func (s *Service) localPodOf(a netip.Addr) policy.PodKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ir == nil {
		return policy.PodKey{}
	}
	for i := range s.ir.Pods {
		for _, ip := range s.ir.Pods[i].IPs {
			if ip.Unmap() == a {
				return s.ir.Pods[i].Pod
			}
		}
	}
	return policy.PodKey{}
}

func protocolName(p uint8) string {
	switch p {
	case 1:
		return "ICMP"
	case 58:
		return "ICMPv6"
	}
	return policy.Protocol(p).String() // TCP, UDP, SCTP, else the number
}
