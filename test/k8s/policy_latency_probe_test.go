package k8s_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// BenchmarkPolicyLatency's probes: TCP connects made by the test process
// itself from inside a client pod's network namespace, so that a probe
// costs a socket and a SYN, not an exec in the pod, and its timestamps
// are the test's own clock.

const (
	// probeEvery is how often a prober starts a probe; the figures'
	// resolution.
	probeEvery = 5 * time.Millisecond
	// probeTimeout is how long a probe waits for an answer: no answer by
	// then is a drop (the first SYN retransmission comes a second later).
	probeTimeout = 50 * time.Millisecond
	// settleProbes is how many probes in a row must agree before a
	// verdict counts as the pair's.
	settleProbes = 10
)

// probeResult is what a probe's SYN got.
type probeResult int

const (
	probePending   probeResult = iota
	probeConnected             // a SYN-ACK: a listener accepted
	probeRefused               // a reset: the pod was reached, nothing listens yet
	probeDropped               // no answer within probeTimeout
	probeFailed                // anything else (no route, no socket...)
)

// probe is one connect: start is just before the SYN, end when its
// answer (or the timeout) was seen.
type probe struct {
	start, end time.Time
	result     probeResult
	err        error
}

func (p probe) answered() bool { return p.result == probeConnected || p.result == probeRefused }

var errProbeTimeout = errors.New("no answer")

// podNetNS opens the network namespace of pod's ready sandbox on n.
// containerd pins it under its state directory, a mount in the node's
// mount namespace that the test's own does not see; the path is opened
// through containerd's /proc/<pid>/root, which resolves in that mount
// namespace. The handle keeps the namespace alive until it is closed.
func podNetNS(ctx context.Context, n *cluster.Node, pod *corev1.Pod) (*netns.NetNS, error) {
	sbs, err := n.Sandboxes(ctx)
	if err != nil {
		return nil, err
	}
	for _, sb := range sbs {
		if sb.PodUID != string(pod.UID) || !sb.Ready || sb.NetNS == "" {
			continue
		}
		pid := n.PID("containerd")
		if pid == 0 {
			return nil, fmt.Errorf("%s: containerd is not running", n.Name)
		}
		return netns.Open(fmt.Sprintf("/proc/%d/root%s", pid, sb.NetNS))
	}
	return nil, fmt.Errorf("no ready sandbox with a network namespace for pod %s on %s", pod.Name, n.Name)
}

// dialFrom makes one TCP connect to dst from inside ns and closes it
// with a reset (no TIME_WAIT in the pod, nothing half-open on the
// server). Only the socket is made inside the namespace (a socket stays
// in the namespace it was made in); the connect and the wait run on
// any thread.
func dialFrom(ns *netns.NetNS, dst netip.AddrPort, timeout time.Duration) probe {
	return dialFromPort(ns, 0, dst, timeout)
}

// dialFromPort is dialFrom from source port srcPort (0: the kernel's
// choice).
func dialFromPort(ns *netns.NetNS, srcPort int, dst netip.AddrPort, timeout time.Duration) probe {
	var fd int
	err := ns.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err == nil && srcPort != 0 {
			if err = unix.Bind(fd, &unix.SockaddrInet4{Port: srcPort}); err != nil {
				unix.Close(fd)
			}
		}
		return err
	})
	if err != nil {
		now := time.Now()
		return probe{start: now, end: now, result: probeFailed, err: err}
	}
	defer unix.Close(fd)
	_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1})
	p := probe{start: time.Now()}
	err = unix.Connect(fd, &unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().As4()})
	if errors.Is(err, unix.EINPROGRESS) {
		err = waitConnected(fd, p.start.Add(timeout))
	}
	p.end = time.Now()
	switch {
	case err == nil:
		p.result = probeConnected
	case errors.Is(err, unix.ECONNREFUSED):
		p.result = probeRefused
	case errors.Is(err, errProbeTimeout):
		p.result = probeDropped
	default:
		p.result, p.err = probeFailed, err
	}
	return p
}

// waitConnected waits until the non-blocking connect on fd completes or
// deadline passes, and returns the connect's outcome.
func waitConnected(fd int, deadline time.Time) error {
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return errProbeTimeout
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(fds, int((left+time.Millisecond-1)/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			continue // the deadline is checked above
		}
		soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return err
		}
		if soErr != 0 {
			return unix.Errno(soErr)
		}
		return nil
	}
}

// probeLog is the record of one prober (one client to one server), the
// probes in the order they were started.
type probeLog struct {
	mu     sync.Mutex
	probes []probe
}

// probePair starts probing dst from ns every probeEvery until ctx ends,
// each probe in a goroutine of its own so that a dropped one does not
// delay the next. wg is done when the last probe has ended.
func probePair(ctx context.Context, wg *sync.WaitGroup, ns *netns.NetNS, dst netip.AddrPort) *probeLog {
	l := &probeLog{}
	wg.Go(func() {
		tickProbes(ctx, probeEvery, func() func() {
			l.mu.Lock()
			i := len(l.probes)
			l.probes = append(l.probes, probe{start: time.Now()})
			l.mu.Unlock()
			return func() {
				p := dialFrom(ns, dst, probeTimeout)
				l.mu.Lock()
				l.probes[i] = p
				l.mu.Unlock()
			}
		})
	})
	return l
}

// tickProbes calls start every period until ctx ends and runs the probe
// it returns in a goroutine of its own, so that a dropped probe does not
// delay the next; start records the probe's start, the probe its end. It
// returns when the last probe has ended.
func tickProbes(ctx context.Context, every time.Duration, start func() func()) {
	var inflight sync.WaitGroup
	defer inflight.Wait()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		inflight.Go(start())
	}
}

// settledSince says since when every probe has had the verdict want: the
// start of the first probe, among those started at or after from, from
// which on every ended probe has it, provided at least settleProbes
// have. Probes after the first one still pending are not looked at.
func (l *probeLog) settledSince(from time.Time, want probeResult) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	end := 0
	for end < len(l.probes) && l.probes[end].result != probePending {
		end++
	}
	var since time.Time
	run := 0
	for i := end - 1; i >= 0 && !l.probes[i].start.Before(from); i-- {
		if l.probes[i].result != want {
			break
		}
		since, run = l.probes[i].start, run+1
	}
	return since, run >= settleProbes
}

// failures returns the number of probes that failed otherwise than by a
// drop or a refusal, and the first such error.
func (l *probeLog) failures() (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	var first error
	for _, p := range l.probes {
		if p.result == probeFailed {
			if n == 0 {
				first = p.err
			}
			n++
		}
	}
	return n, first
}

// cniAdded is the result libcni cached for a pod's network once the
// network's ADD returned.
type cniAdded struct {
	// at is the cache file's modification time: libcni writes it right
	// after the chain's last plugin returned (the kernel's coarse clock:
	// a tick, 4 ms here, at most). seen is when the poll found it.
	at, seen time.Time
	ip       netip.Addr
	// file is the cache entry; DEL removes it.
	file string
}

// cniCached is the part of libcni's result cache entry
// (results/<network>-<container ID>-<ifname>) read here.
type cniCached struct {
	NetworkName string      `json:"networkName"`
	CNIArgs     [][2]string `json:"cniArgs"`
	Result      struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	} `json:"result"`
}

// waitCNIAdded polls n's CNI result cache every millisecond until the
// entry of pod namespace/name's network (not containerd's loopback) is
// there, and returns when it was written and the pod's IPv4 address.
func waitCNIAdded(ctx context.Context, n *cluster.Node, namespace, name string, timeout time.Duration) (cniAdded, error) {
	dir := filepath.Join(n.CNICacheDir, "results")
	others := map[string]bool{}
	deadline := time.Now().Add(timeout)
	for {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if others[e.Name()] || strings.HasPrefix(e.Name(), "cni-loopback-") {
				continue
			}
			file := filepath.Join(dir, e.Name())
			data, err := os.ReadFile(file)
			seen := time.Now()
			var cached cniCached
			if err != nil || json.Unmarshal(data, &cached) != nil {
				continue // being written: read it again next time
			}
			if !cachedFor(cached, namespace, name) {
				others[e.Name()] = true
				continue
			}
			fi, err := os.Stat(file)
			if err != nil {
				return cniAdded{}, err
			}
			for _, ip := range cached.Result.IPs {
				if pfx, err := netip.ParsePrefix(ip.Address); err == nil && pfx.Addr().Is4() {
					return cniAdded{at: fi.ModTime(), seen: seen, ip: pfx.Addr(), file: file}, nil
				}
			}
			return cniAdded{}, fmt.Errorf("%s: no IPv4 address in the cached result: %s", file, data)
		}
		if time.Now().After(deadline) {
			return cniAdded{}, fmt.Errorf("no CNI result cached for %s/%s on %s %s after its create", namespace, name, n.Name, timeout)
		}
		select {
		case <-ctx.Done():
			return cniAdded{}, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func cachedFor(c cniCached, namespace, name string) bool {
	var ns, pod string
	for _, kv := range c.CNIArgs {
		switch kv[0] {
		case "K8S_POD_NAMESPACE":
			ns = kv[1]
		case "K8S_POD_NAME":
			pod = kv[1]
		}
	}
	return ns == namespace && pod == name
}
