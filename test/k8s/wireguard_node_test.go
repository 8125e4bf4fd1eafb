package k8s_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	podnetns "github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestWireGuard's look at the nodes: podnet.wg's peers through its UAPI
// socket, the agent's routes, the published keys and the agents' logs.

const (
	// wgKeyAnnotation is where the agent publishes its node's public key
	// (the Kubernetes datastore).
	wgKeyAnnotation = "podnet.io/wireguard-public-key"
	wgDevice        = "podnet.wg"
	// wgSocket is wireguard-go's UAPI socket, under the DaemonSet's
	// hostPath /var/run/wireguard (each node keeps its own: HostPath).
	wgSocket  = "/var/run/wireguard/" + wgDevice + ".sock"
	wgKeyFile = "/var/lib/podnet/wireguard.key"
)

// wgPeer is one peer of podnet.wg as its UAPI socket reports it; keys in
// base64, as the annotation has them.
type wgPeer struct {
	key, endpoint string
	allowed       []string
	handshake     int64 // last handshake, Unix seconds; 0: none yet
	rx, tx        int64 // bytes received from and sent to the peer
}

// wgState is each node's peers' handshake and byte counts, for the log
// of a step whose traffic was slow to come back.
func wgState(c *cluster.Cluster) string {
	var out []string
	for _, n := range c.Nodes {
		_, peers, err := wgDeviceOf(n)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		for _, p := range peers {
			hs := "no handshake"
			if p.handshake != 0 {
				hs = "handshake at " + time.Unix(p.handshake, 0).UTC().Format("15:04:05")
			}
			out = append(out, fmt.Sprintf("%s: peer %s at %s: %s, rx %d tx %d bytes", n.Name, p.key[:8], p.endpoint, hs, p.rx, p.tx))
		}
	}
	return strings.Join(out, "; ")
}

// wgDeviceOf reads n's podnet.wg through wireguard-go's UAPI socket
// ("get=1"): its listen port and peers. The answer's private_key line
// is read past and never kept.
func wgDeviceOf(n *cluster.Node) (port int, peers []wgPeer, err error) {
	path := n.HostPath(wgSocket)
	conn, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: UAPI socket: %w", n.Name, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "get=1\n\n"); err != nil {
		return 0, nil, fmt.Errorf("%s: UAPI get: %w", n.Name, err)
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		var p *wgPeer
		if len(peers) > 0 {
			p = &peers[len(peers)-1]
		}
		switch {
		case k == "":
			return port, peers, nil // the blank line that ends the answer
		case k == "errno" && v != "0":
			return 0, nil, fmt.Errorf("%s: UAPI get: errno %s", n.Name, v)
		case k == "listen_port":
			port, _ = strconv.Atoi(v)
		case k == "public_key":
			b, err := hex.DecodeString(v)
			if err != nil {
				return 0, nil, fmt.Errorf("%s: UAPI peer key %q: %w", n.Name, v, err)
			}
			peers = append(peers, wgPeer{key: base64.StdEncoding.EncodeToString(b)})
		case p == nil:
			// The device's own lines (private_key, fwmark).
		case k == "endpoint":
			p.endpoint = v
		case k == "allowed_ip":
			p.allowed = append(p.allowed, v)
		case k == "last_handshake_time_sec":
			p.handshake, _ = strconv.ParseInt(v, 10, 64)
		case k == "rx_bytes":
			p.rx, _ = strconv.ParseInt(v, 10, 64)
		case k == "tx_bytes":
			p.tx, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, nil, fmt.Errorf("%s: UAPI get: answer cut short: %v", n.Name, sc.Err())
}

// peerFor returns the peer of key among peers.
func peerFor(peers []wgPeer, key string) (wgPeer, bool) {
	for _, p := range peers {
		if p.key == key {
			return p, true
		}
	}
	return wgPeer{}, false
}

// protoRoutes is n's agent's IPv4 routes (protocol 97), as ip shows them.
func protoRoutes(n *cluster.Node) (string, error) {
	out, err := exec.Command("nsenter", "--net="+n.NetNS, "ip", "-4", "route", "show", "proto", "97").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ip route on %s: %v: %s", n.Name, err, out)
	}
	return string(out), nil
}

// hasRoute says whether routes (ip route's lines) hold one that starts
// with prefix: "10.244.1.0/24 dev podnet.wg", "unreachable 10.244.1.0/24".
func hasRoute(routes, prefix string) bool {
	for _, l := range strings.Split(routes, "\n") {
		if strings.HasPrefix(l, prefix+" ") {
			return true
		}
	}
	return false
}

// nodeWG is a node's published key and pod CIDR, from its Node.
type nodeWG struct {
	key, podCIDR string
}

func nodeWGOf(ctx context.Context, n *cluster.Node) (nodeWG, error) {
	obj, err := n.Object(ctx)
	if err != nil {
		return nodeWG{}, err
	}
	return nodeWG{key: obj.Annotations[wgKeyAnnotation], podCIDR: obj.Spec.PodCIDR}, nil
}

// encryptedTo says why n does not yet send to peer's pods through
// podnet.wg: a route to peer's pod CIDR through the device, and a peer
// of peer's published key at its underlay address and the port, whose
// allowed IPs hold the CIDR.
func encryptedTo(ctx context.Context, n, peer *cluster.Node) error {
	want, err := nodeWGOf(ctx, peer)
	if err != nil {
		return err
	}
	if _, err := wgtypes.ParseKey(want.key); err != nil {
		return fmt.Errorf("%s's annotation %s %q: %v", peer.Name, wgKeyAnnotation, want.key, err)
	}
	routes, err := protoRoutes(n)
	if err != nil {
		return err
	}
	if !hasRoute(routes, want.podCIDR+" dev "+wgDevice) {
		return fmt.Errorf("%s: no route %s dev %s: %s", n.Name, want.podCIDR, wgDevice, routes)
	}
	port, peers, err := wgDeviceOf(n)
	if err != nil {
		return err
	}
	p, ok := peerFor(peers, want.key)
	switch {
	case port != wgPort:
		return fmt.Errorf("%s: %s listens on %d, want %d", n.Name, wgDevice, port, wgPort)
	case !ok:
		return fmt.Errorf("%s: %s has no peer of %s's key (%d peers)", n.Name, wgDevice, peer.Name, len(peers))
	case p.endpoint != fmt.Sprintf("%s:%d", peer.IP, wgPort):
		return fmt.Errorf("%s: %s's peer %s at %s, want %s:%d", n.Name, wgDevice, peer.Name, p.endpoint, peer.IP, wgPort)
	case !strings.Contains(" "+strings.Join(p.allowed, " ")+" ", " "+want.podCIDR+" "):
		return fmt.Errorf("%s: %s's peer %s allows %v, want %s among them", n.Name, wgDevice, peer.Name, p.allowed, want.podCIDR)
	}
	return nil
}

// waitEncrypted waits until each node sends to the other's pods through
// podnet.wg (encryptedTo).
func waitEncrypted(ctx context.Context, t *testing.T, c *cluster.Cluster, timeout time.Duration) {
	t.Helper()
	for i, n := range c.Nodes {
		waitUntil(ctx, t, n.Name+" encrypting to "+c.Nodes[1-i].Name, timeout, func() error {
			return encryptedTo(ctx, n, c.Nodes[1-i])
		})
	}
}

// checkNodesWG checks each node's device, key file and agent log once
// encryption is on, and logs what each runs: podnet.wg's link, the key
// file's mode and that the published key is the file's, the agent's
// "wireguard ready" line (kernel or userspace), and no private key in
// the log.
func checkNodesWG(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	for _, n := range c.Nodes {
		link, err := exec.Command("nsenter", "--net="+n.NetNS, "ip", "-o", "-d", "link", "show", wgDevice).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: no %s: %v: %s", n.Name, wgDevice, err, link)
		}
		mine, err := nodeWGOf(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		file := n.HostPath(wgKeyFile)
		fi, err := os.Stat(file)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: key file %s: %v, mode %v; want 0600", n.Name, wgKeyFile, err, fi.Mode().Perm())
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		priv, err := wgtypes.ParseKey(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: key file %s does not hold a key: %v", n.Name, wgKeyFile, err)
		}
		if pub := priv.PublicKey().String(); pub != mine.key {
			t.Errorf("%s: published key %q, but the key file's public key is %q", n.Name, mine.key, pub)
		}
		log := agentLog(ctx, t, c, n)
		if strings.Contains(log, priv.String()) {
			t.Errorf("%s: the agent's log holds the node's private key", n.Name)
		}
		ready := logLine(log, "wireguard ready")
		if ready == "" {
			t.Errorf("%s: the agent's log has no \"wireguard ready\" line", n.Name)
		}
		fields := strings.Fields(string(link))
		t.Logf("%s: %s %s; key file 0600, its public key %s published; agent: %s", n.Name, wgDevice, strings.Join(fields[min(2, len(fields)):min(6, len(fields))], " "), mine.key, ready)
	}
}

// agentLog is the log of n's running agent container.
func agentLog(ctx context.Context, t *testing.T, c *cluster.Cluster, n *cluster.Node) string {
	t.Helper()
	pod, _ := agentOn(ctx, t, c, n)
	b, err := c.Client.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "agent"}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("log of %s's agent %s: %v", n.Name, pod.Name, err)
	}
	return string(b)
}

// logLine returns the first line of log holding every one of words, or
// "".
func logLine(log string, words ...string) string {
	for _, l := range strings.Split(log, "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(l, w)
		}
		if all {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// annotateNode sets (or with value "" removes) annotation key on the
// Node called name through the API, as `kubectl annotate --overwrite`.
func annotateNode(ctx context.Context, c *cluster.Cluster, name, key, value string) error {
	v := "null"
	if value != "" {
		v = strconv.Quote(value)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, key, v)
	_, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// hostToRemotePod connects from node 1's own network namespace (as the
// API server's pod proxy or a NodePort's SNAT would) to wg-b on node 2:
// the packet goes through node 1's podnet.wg with node 1's address as
// its source, which node 2's WireGuard accepts only because each peer's
// allowed IPs hold its node's address too.
func (w *wgWorld) hostToRemotePod(t *testing.T) {
	t.Helper()
	addr := net.JoinHostPort(w.bIP.String(), strconv.Itoa(diagPort))
	var err error
	for range 5 {
		err = podnetns.Do(w.c.Nodes[0].NetNS, func() error {
			conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
			if err == nil {
				conn.Close()
			}
			return err
		})
		if err == nil {
			return
		}
	}
	t.Errorf("%s's host to wg-b on %s (%s) with encryption on: %v", w.c.Nodes[0].Name, w.c.Nodes[1].Name, addr, err)
}
