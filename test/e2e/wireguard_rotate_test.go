package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/e2e/e2enet"
)

// checkRotation: while pods of n1 and n2 exchange UDP probes both ways
// every 2 ms, `podnet wireguard rotate-key` runs in n1's agent's
// namespaces (as `kubectl exec` runs it in the agent's pod). The new
// public key is in n1's record and on its device, the probes resume,
// and the reader on n1's switch port sees no probe payload and no pod
// address at any time: nothing goes in the clear. The gap (the longest
// time without an answered probe, each way) is logged; it must stay
// under a refused handshake's 5 s retry, which is what it would be if
// n1 did not restart its handshakes until n2 answers.
//
// Then n1's key file is made malformed: the agent is not ready, naming
// the file, and its pods' traffic still flows, encrypted on the key it
// has; with the file back it is ready again.
func checkRotation(t *testing.T, c *cluster, cap *capture, src, dst *e2enet.Pod, payload []byte, nodes []*e2enet.Node) {
	t.Helper()
	n1 := src.Node
	keyFile := filepath.Join(n1.Dir, "wireguard.key")
	old := c.NodeRecord(n1.Name).WireGuardKey
	cap.take()
	fwd := startProbes(t, src, dst, dst.IP, payload)
	back := startProbes(t, dst, src, src.IP, payload)
	time.Sleep(time.Second)
	start := time.Now()
	out := rotateKey(t, c, n1, keyFile)
	took := time.Since(start)
	newKey := strings.TrimSpace(out)
	testutil.WaitFor(t, "n1's record to hold the new key", 10*time.Second, func() (bool, error) {
		return c.NodeRecord(n1.Name).WireGuardKey == newKey, nil
	})
	time.Sleep(time.Second)
	fr, br := fwd.stop(), back.stop()
	frames := cap.take()
	if newKey == "" || newKey == old {
		t.Fatalf("rotate-key printed %q; the old public key was %q", newKey, old)
	}
	found, clearPods, other := inspect(frames, payload, c, nodes)
	t.Logf("rotation: %d frames on sw-n1 during it, payload found %d times, %d with pod addresses, %d other between nodes; rotate-key took %v",
		len(frames), found, clearPods, len(other), took.Round(time.Millisecond))
	if found != 0 || clearPods != 0 || len(other) != 0 {
		t.Errorf("rotation: payload found %d times, %d frames with pod addresses, between nodes not WireGuard: %v", found, clearPods, other)
	}
	for _, r := range []probeResult{fr, br} {
		gap, at := r.gap(start, r.ended)
		base, _ := r.gap(r.started, start)
		t.Logf("key rotation gap %s: %v from %s (longest time without an answered probe from the command's start; %v in the %v before it; %d sent, %d answered)",
			r.name, gap.Round(time.Millisecond), at.UTC().Format("15:04:05.000"), base.Round(time.Millisecond), start.Sub(r.started).Round(time.Millisecond), r.sent, len(r.answers))
		if len(r.answers) == 0 || r.answers[len(r.answers)-1].Before(start) {
			t.Errorf("%s: no probe answered after the rotation", r.name)
		}
		if gap > 4*time.Second {
			t.Errorf("%s: gap %v; want well under a handshake retry's 5 s", r.name, gap)
		}
	}
	// The agents' own account: publication, the device, the peers.
	for _, n := range []*e2enet.Node{n1, dst.Node} {
		for _, l := range strings.Split(n.Log(), "\n") {
			if strings.Contains(l, "wireguard key") || strings.Contains(l, "new key") || strings.Contains(l, "wireguard peers reconciled") && n != n1 {
				t.Logf("%s: %s", n.Name, l)
			}
		}
	}
	checkKeyFileBroken(t, c, src, dst, payload, keyFile)
}

// rotateKey runs `podnet wireguard rotate-key` in n's agent's mount and
// network namespaces, where it sees the node's key file and reaches
// podnet.wg (its UAPI socket), and returns what it printed.
func rotateKey(t *testing.T, c *cluster, n *e2enet.Node, keyFile string) string {
	t.Helper()
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Fatalf("nsenter (util-linux) is needed to run the command in the agent's namespaces: %v", err)
	}
	cmd := exec.Command(nsenter, "-t", fmt.Sprint(n.AgentPID()), "-m", "-n", "--", c.Podnet, "wireguard", "rotate-key", "--key-file", keyFile, "--wait", "10s")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("podnet wireguard rotate-key: %v\n%s", err, stderr.String())
	}
	t.Logf("podnet wireguard rotate-key: %s", strings.TrimSpace(stderr.String()))
	return stdout.String()
}

// checkKeyFileBroken: n1's key file made malformed while its agent runs
// leaves the agent not ready, naming the file, and its pods' traffic
// flowing encrypted on the key the device has (still published); the
// file put back makes it ready again.
func checkKeyFileBroken(t *testing.T, c *cluster, src, dst *e2enet.Pod, payload []byte, keyFile string) {
	t.Helper()
	n := src.Node
	good, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := os.WriteFile(keyFile, good, 0o600); err != nil {
				t.Error(err)
			}
		}
	}
	defer restore()
	testutil.WaitFor(t, n.Name+" not ready naming its key file", 10*time.Second, func() (bool, error) {
		err := c.Ready(n)
		return err != nil && strings.Contains(err.Error(), keyFile), nil
	})
	t.Logf("key file broken while running: %v", c.Ready(n))
	if err := exchange(src, dst, dst.IP, payload); err != nil {
		t.Errorf("key file broken while running: pod traffic stopped: %v; want it encrypted on the key the device has", err)
	}
	restore()
	testutil.WaitFor(t, n.Name+" ready with its key file back", 10*time.Second, func() (bool, error) { return c.Ready(n) == nil, nil })
}

// probes sends a UDP probe carrying payload from one pod to an echo in
// another every 2 ms and records when each answer came.
type probes struct {
	name    string
	conn    *net.UDPConn
	echo    net.PacketConn
	done    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	sent    int
	answers []time.Time
	started time.Time
	ended   time.Time
}

// probeResult is what a run of probes saw.
type probeResult struct {
	name    string
	sent    int
	answers []time.Time
	started time.Time
	ended   time.Time
}

// startProbes starts probes from src to an echo on dst's address ip.
func startProbes(t *testing.T, src, dst *e2enet.Pod, ip netip.Addr, payload []byte) *probes {
	t.Helper()
	p := &probes{name: fmt.Sprintf("%s -> %s", src.Node.Name, dst.Node.Name), done: make(chan struct{})}
	err := netns.Do(dst.NS, func() (err error) {
		p.echo, err = net.ListenPacket("udp", net.JoinHostPort(ip.String(), "0"))
		return err
	})
	if err == nil {
		err = netns.Do(src.NS, func() (err error) {
			p.conn, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(p.echo.LocalAddr().String())))
			return err
		})
	}
	if err != nil {
		if p.echo != nil {
			p.echo.Close()
		}
		t.Fatalf("probes %s: %v", p.name, err)
	}
	p.started = time.Now()
	p.wg.Go(func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := p.echo.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = p.echo.WriteTo(buf[:n], from)
		}
	})
	p.wg.Go(func() {
		buf := make([]byte, 2048)
		for {
			n, err := p.conn.Read(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err == nil && bytes.Contains(buf[:n], payload) {
				p.mu.Lock()
				p.answers = append(p.answers, time.Now())
				p.mu.Unlock()
			}
		}
	})
	p.wg.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for seq := 0; ; seq++ {
			select {
			case <-p.done:
				return
			case <-tick.C:
			}
			_, _ = p.conn.Write(fmt.Appendf(nil, "%s %d", payload, seq))
			p.mu.Lock()
			p.sent++
			p.mu.Unlock()
		}
	})
	t.Cleanup(func() { p.stop() })
	return p
}

// stop ends the probes (once) and says what they saw.
func (p *probes) stop() probeResult {
	select {
	case <-p.done:
	default:
		close(p.done)
		p.ended = time.Now()
		time.Sleep(50 * time.Millisecond) // the last answers
		p.conn.Close()
		p.echo.Close()
		p.wg.Wait()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r := probeResult{name: p.name, sent: p.sent, answers: slices.Clone(p.answers), started: p.started, ended: p.ended}
	slices.SortFunc(r.answers, time.Time.Compare)
	return r
}

// gap is the longest time without an answer between from and to, and
// when it began.
func (r probeResult) gap(from, to time.Time) (gap time.Duration, at time.Time) {
	last := from
	for _, a := range append(slices.Clone(r.answers), to) {
		if a.Before(from) || a.After(to) {
			continue
		}
		if a.Sub(last) > gap {
			gap, at = a.Sub(last), last
		}
		last = a
	}
	return gap, at
}
