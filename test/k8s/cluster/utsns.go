package cluster

import (
	"os"
	"path/filepath"
)

// setupUTSNS gives the node a UTS namespace of its own whose hostname is
// the node's name, bound to a file beside its mount namespace's (and
// unmounted with them). Its kubelet, containerd and kube-proxy run in it,
// so a host-network pod sees the node's name as its hostname, as on a
// real node: the upstream specs whose endpoints use the host network
// expect a node's pods to answer with the Node's name, not the machine's.
func (c *Cluster) setupUTSNS(n *Node) error {
	dir, err := c.mountNSDir()
	if err != nil {
		return err
	}
	n.utsNS = filepath.Join(dir, n.Name+".uts")
	if err := os.WriteFile(n.utsNS, nil, 0o600); err != nil {
		return err
	}
	return run("unshare", "--uts="+n.utsNS, "hostname", n.Name)
}
