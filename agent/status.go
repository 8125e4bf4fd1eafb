package agent

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/podnet/podnet/agent/agentstatus"
)

// loopbackNetwork is the loopback attachment's network name
// (netplugin.LoopbackNetworkName, containerd's too), not imported: the
// agent links nothing of the runtime side.
const loopbackNetwork = "cni-loopback"

// describe is the part of the status document the agent's config
// decides.
func (cfg *Config) describe() agentstatus.Document {
	d := agentstatus.Document{Node: cfg.Node, RoutingMode: string(cfg.Mode), Encryption: agentstatus.Encryption{Mode: cfg.Encryption}}
	d.Version, d.Revision = agentstatus.Build()
	switch {
	case cfg.Kube == nil:
		d.Datastore, d.IPAM = "etcd", "etcd"
	case cfg.Kube.Blocks != nil:
		d.Datastore, d.IPAM = "kubernetes", "blocks"
	default:
		d.Datastore, d.IPAM = "kubernetes", "node-cidr"
	}
	return d
}

// status is the agent's /status document. It asks each service for its
// readiness, as /readyz does, and reads the policy and WireGuard
// summaries, which take no lock; nothing waits for a rebuild.
func (a *Agent) status() agentstatus.Document {
	d := a.cfg.describe()
	d.Services, d.Ready = services(a.readiness())
	if a.wg != nil {
		d.Encryption.Implementation, d.Encryption.Peers = a.wg.Status()
	}
	if a.policy != nil {
		sum, resync, ok := a.policy.Status()
		p := &agentstatus.Policy{ResyncSeconds: resync.Seconds()}
		if ok {
			p.LastApplied, p.AgeSeconds = sum.Applied, time.Since(sum.Applied).Seconds()
			p.NetworkPolicies, p.ClusterNetworkPolicies, p.IsolatedPods, p.Rules = sum.NetworkPolicies, sum.ClusterNetworkPolicies, sum.IsolatedPods, sum.Rules
		}
		d.Policy = p
	}
	d.Attachments = countAttachments(a.cfg.CacheDir)
	d.Time = time.Now()
	return d
}

func services(sts []status) ([]agentstatus.Service, bool) {
	out := make([]agentstatus.Service, len(sts))
	ready := true
	for i, st := range sts {
		out[i] = agentstatus.Service{Name: st.name, Ready: st.err == nil}
		if st.err != nil {
			out[i].Reason, ready = st.err.Error(), false
		}
	}
	return out, ready
}

// countAttachments counts the pod attachments in the CNI result cache
// under dir (results/<network>-<containerID>-<ifname>), the loopback's
// and writers' temp files left out: names only, no file is read. -1
// when the directory cannot be read; 0 when there is none yet.
func countAttachments(dir string) int {
	entries, err := os.ReadDir(filepath.Join(dir, "results"))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if e.Type().IsRegular() && !strings.HasPrefix(name, ".") && !strings.HasPrefix(name, loopbackNetwork+"-") {
			n++
		}
	}
	return n
}

// serveStatus writes doc as JSON; 200 whether or not the agent is ready
// (the document says), so that a client reads the reasons in one
// request.
func serveStatus(doc func() agentstatus.Document) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(doc())
	}
}
