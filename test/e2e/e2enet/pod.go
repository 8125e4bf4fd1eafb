package e2enet

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// Pod is a namespace wired by the real plugin on a node.
type Pod struct {
	// ID is its container ID.
	ID   string
	Node *Node
	// NS is its namespace's path.
	NS string
	// IP and IP6 are its addresses; IP6 is invalid unless the node's
	// pools have an IPv6 one.
	IP, IP6 netip.Addr
	del     func() error
	deleted bool
}

// AddPod starts a pod on n the way a runtime does: the network config
// the node's agent installed, the plugins it installed, run inside the
// node's namespace. Its address of each family of n.Pools must be from
// one of them. The pod serves TCP echo on each of its addresses.
func (c *Cluster) AddPod(n *Node) *Pod {
	t := c.T
	t.Helper()
	id := fmt.Sprintf("%s-pod%d", n.Name, len(n.Pods))
	_, path := testutil.NewNetNS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	confPath := c.ConfPath(n)
	b, err := os.ReadFile(confPath)
	if err != nil {
		t.Fatal(err)
	}
	list, err := cni.ParseNetworkConfigList(b, confPath)
	if err != nil {
		t.Fatal(err)
	}
	rt := &cni.RuntimeConf{ContainerID: id, NetNS: path, IfName: "eth0"}
	res, err := n.runtime.AddNetworkList(ctx, list, rt)
	if err != nil {
		t.Fatalf("pod %s: ADD: %v", id, err)
	}
	p := &Pod{ID: id, Node: n, NS: path}
	p.del = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.runtime.DelNetworkList(ctx, list, rt); err != nil {
			return fmt.Errorf("pod %s: DEL: %w", id, err)
		}
		return nil
	}
	t.Cleanup(func() {
		if !p.deleted {
			if err := p.del(); err != nil {
				t.Error(err)
			}
		}
	})
	for _, ip := range res.IPs {
		if a := ip.Address.Addr(); a.Is4() {
			p.IP = a
		} else {
			p.IP6 = a
		}
	}
	if !n.fromPools(p.IP, true) || !n.fromPools(p.IP6, false) {
		t.Fatalf("pod %s: result %+v: want one address of each family from %v", id, res.IPs, n.Pools)
	}
	n.Pods = append(n.Pods, p)
	p.serve(t)
	return p
}

// fromPools reports whether a, of family IPv4 when is4, is from one of
// n's pools of that family, or invalid when none is of it.
func (n *Node) fromPools(a netip.Addr, is4 bool) bool {
	has := false
	for _, p := range n.Pools {
		if p.Addr().Is4() != is4 {
			continue
		}
		has = true
		if a.IsValid() && p.Contains(a) {
			return true
		}
	}
	return !has && !a.IsValid()
}

// DelPods deletes every pod of the cluster, as the runtime does when
// they stop.
func (c *Cluster) DelPods() {
	t := c.T
	t.Helper()
	for _, p := range c.AllPods() {
		p.deleted = true
		if err := p.del(); err != nil {
			t.Error(err)
		}
	}
}

// AllPods returns every pod of the cluster.
func (c *Cluster) AllPods() []*Pod {
	var out []*Pod
	for _, n := range c.nodes {
		out = append(out, n.Pods...)
	}
	return out
}

// Addrs are the pod's addresses, IPv4 first.
func (p *Pod) Addrs() []netip.Addr {
	var out []netip.Addr
	for _, a := range []netip.Addr{p.IP, p.IP6} {
		if a.IsValid() {
			out = append(out, a)
		}
	}
	return out
}

// own is the pod's address of dst's family.
func (p *Pod) own(dst netip.Addr) netip.Addr {
	if dst.Is4() {
		return p.IP
	}
	return p.IP6
}

const echoPort = 7070

// echoTimeout bounds one echo exchange, a bulk transfer's too.
const echoTimeout = 10 * time.Second

// serve starts a TCP server on each of the pod's addresses, inside the
// pod: it reads a message to its end and answers with the source address
// it saw and the message.
func (p *Pod) serve(t testing.TB) {
	for _, ip := range p.Addrs() {
		p.serveOn(t, ip)
	}
}

func (p *Pod) serveOn(t testing.TB, ip netip.Addr) {
	var l net.Listener
	err := netns.Do(p.NS, func() (err error) {
		l, err = net.Listen("tcp", net.JoinHostPort(ip.String(), fmt.Sprint(echoPort)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(echoTimeout))
				msg, err := io.ReadAll(conn)
				if err != nil {
					return
				}
				src := conn.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
				_, _ = fmt.Fprintf(conn, "%s %s", src, msg)
			}()
		}
	}()
}

// talkTo opens a TCP connection from p to q's address dst and checks
// that the message comes back, and that q saw p's own address as the
// source.
func (p *Pod) talkTo(q *Pod, dst netip.Addr) error {
	what := fmt.Sprintf("%s -> %s (%s)", p.ID, q.ID, dst)
	var conn net.Conn
	err := netns.Do(p.NS, func() (err error) {
		conn, err = (&net.Dialer{Timeout: 2 * time.Second}).Dial("tcp", net.JoinHostPort(dst.String(), fmt.Sprint(echoPort)))
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	msg := "hello from " + p.ID
	if _, err := conn.Write([]byte(msg)); err != nil {
		return fmt.Errorf("%s: write: %w", what, err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	got, err := io.ReadAll(conn)
	if err != nil {
		return fmt.Errorf("%s: read: %w", what, err)
	}
	seen, echoed, ok := strings.Cut(string(got), " ")
	if !ok || echoed != msg {
		return fmt.Errorf("%s: answer %q, want the source address seen and %q", what, got, msg)
	}
	if want := p.own(dst); seen != want.String() {
		return fmt.Errorf("%s: %s saw source %s, want %s's own address %s (no NAT between pods)", what, q.ID, seen, p.ID, want)
	}
	return nil
}
