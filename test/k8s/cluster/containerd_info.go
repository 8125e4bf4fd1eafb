package cluster

import (
	"context"
	"encoding/json"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RuntimeInfo is what the node's containerd says of itself through CRI,
// as crictl version and crictl info show it.
type RuntimeInfo struct {
	// Version is the running daemon's (RuntimeVersion).
	Version    string
	Conditions []*runtimeapi.RuntimeCondition
	// CNILoadStatus is "OK", or why containerd could not load the CNI
	// config directory (lastCNILoadStatus).
	CNILoadStatus string
	// Networks are the CNI networks containerd loaded, each with the
	// version its libcni runs it at.
	Networks []CNINetwork
}

// CNINetwork is a network of go-cni's config dump ("cniconfig").
type CNINetwork struct {
	Name, CNIVersion, Source, IFName string
}

// RuntimeInfo asks the node's containerd through CRI (Version, and Status
// with verbose info).
func (n *Node) RuntimeInfo(ctx context.Context) (*RuntimeInfo, error) {
	conn, rs, err := n.criConn()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	v, err := rs.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return nil, fmt.Errorf("CRI Version: %w", err)
	}
	st, err := rs.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return nil, fmt.Errorf("CRI Status: %w", err)
	}
	info := &RuntimeInfo{Version: v.GetRuntimeVersion(), Conditions: st.GetStatus().GetConditions(),
		CNILoadStatus: st.GetInfo()["lastCNILoadStatus"]}
	var dump struct {
		Networks []struct {
			Config struct{ Name, CNIVersion, Source string }
			IFName string
		}
	}
	if raw := st.GetInfo()["cniconfig"]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &dump); err != nil {
			return nil, fmt.Errorf("CRI Status: cniconfig: %w", err)
		}
	}
	for _, nw := range dump.Networks {
		info.Networks = append(info.Networks, CNINetwork{Name: nw.Config.Name, CNIVersion: nw.Config.CNIVersion,
			Source: nw.Config.Source, IFName: nw.IFName})
	}
	return info, nil
}

// SandboxIDs returns the IDs of the pod's sandboxes on the node, ready or not, by
// the pod's UID: the container IDs the runtime gave the CNI plugins, and
// the keys of libcni's cache entries (pod addresses are no key: another
// cluster on the machine may hand out the same ones).
func (n *Node) SandboxIDs(ctx context.Context, podUID string) ([]string, error) {
	conn, rs, err := n.criConn()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	list, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": podUID}},
	})
	if err != nil {
		return nil, fmt.Errorf("CRI ListPodSandbox: %w", err)
	}
	var ids []string
	for _, sb := range list.GetItems() {
		ids = append(ids, sb.GetId())
	}
	return ids, nil
}
