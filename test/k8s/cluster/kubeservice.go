package cluster

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// KubernetesServiceIP is the ClusterIP of the default/kubernetes Service
// (the first address of --service-cluster-ip-range), which the kubelet
// puts in every pod's KUBERNETES_SERVICE_HOST, host-network pods' too.
const KubernetesServiceIP = "10.96.0.1"

// kubeServiceTable is the nftables table that stands in for kube-proxy.
const kubeServiceTable = "podnet-k8s-kubernetes-svc"

// serveKubernetesService does for the default/kubernetes Service what
// kube-proxy would on a node, and nothing more: connections to
// 10.96.0.1:443, from the node's host network (output) or from its pods
// (prerouting), go to the API server's real address. The cluster runs no
// kube-proxy, and a pod that finds the API server through the in-cluster
// config (podnet's agent in the node-CIDR model) dials that address. The
// table lives in the node's network namespace and goes with it.
func serveKubernetesService(n *Node) error {
	fd, err := os.Open(n.NetNS)
	if err != nil {
		return err
	}
	defer fd.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(fd.Fd())))
	if err != nil {
		return err
	}
	t := conn.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: kubeServiceTable})
	svc, to := netip.MustParseAddr(KubernetesServiceIP).As4(), netip.MustParseAddr(NodeIP).As4()
	port := func(p uint16) []byte { return binary.BigEndian.AppendUint16(nil, p) }
	var apiPort uint16
	if _, err := fmt.Sscan(apiserverPort, &apiPort); err != nil {
		return err
	}
	for _, hook := range []struct {
		name string
		hook *nftables.ChainHook
	}{{"output", nftables.ChainHookOutput}, {"prerouting", nftables.ChainHookPrerouting}} {
		c := conn.AddChain(&nftables.Chain{Name: hook.name, Table: t, Type: nftables.ChainTypeNAT,
			Hooknum: hook.hook, Priority: nftables.ChainPriorityNATDest})
		conn.AddRule(&nftables.Rule{Table: t, Chain: c, Exprs: []expr.Any{
			// ip daddr 10.96.0.1 tcp dport 443 dnat to 198.18.0.1:6443
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: svc[:]},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: port(443)},
			&expr.Immediate{Register: 1, Data: to[:]},
			&expr.Immediate{Register: 2, Data: port(apiPort)},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
		}})
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("nftables in %s: %w", n.Name, err)
	}
	return nil
}
