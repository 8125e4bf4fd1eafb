package manifesttest

import (
	"path"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/podnet/podnet/agent"
)

// The agent's encryption setting as every DaemonSet passes it: the
// ConfigMap's key encryption through an optional env entry, so that a
// ConfigMap from before the key still starts the pod. The agent
// recognises exactly this reference, unexpanded, as the key unset
// (cmd/podnet's encryptionRef).
const (
	encryptionEnv = "PODNET_ENCRYPTION"
	encryptionArg = "$(" + encryptionEnv + ")"
	encryptionKey = "encryption"
	// wireguardDir is where wireguard-go serves podnet.wg's UAPI socket,
	// and where `wg` looks for it, on the host.
	wireguardDir = "/var/run/wireguard"
)

// encryptionCheck is what every podnet DaemonSet must be for encryption,
// whichever the ConfigMap picks.
var encryptionCheck = podCheck{"encryption", func(t *testing.T, p *pod) {
	if v, _ := flagValue(argv(p.agent), "encryption"); v != encryptionArg {
		t.Errorf("agent --encryption=%q, want %s", v, encryptionArg)
	}
	var ref *corev1.ConfigMapKeySelector
	for _, e := range p.agent.Env {
		if e.Name == encryptionEnv && e.ValueFrom != nil {
			ref = e.ValueFrom.ConfigMapKeyRef
		}
	}
	if ref == nil || ref.Key != encryptionKey || ref.Optional == nil || !*ref.Optional {
		t.Errorf("agent env %s: %+v, want the ConfigMap's key %s, optional", encryptionEnv, ref, encryptionKey)
	}
	if v, _ := p.expandedFlag(t, p.agent, "encryption"); agentRefuses(agent.Settings{Encryption: v}) {
		t.Errorf("agent --encryption=%q: the agent refuses it", v)
	}
	port, _ := p.expandedFlag(t, p.agent, "wireguard-port")
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		t.Errorf("agent --wireguard-port=%q: want 1 to 65535", port)
	}
	vm, vol := p.volumeAt(p.agent, wireguardDir+"/podnet.wg.sock")
	if vol == nil || vol.HostPath == nil || vm.MountPath != wireguardDir || vm.ReadOnly ||
		path.Clean(vol.HostPath.Path) != wireguardDir || vol.HostPath.Type == nil || *vol.HostPath.Type != corev1.HostPathDirectoryOrCreate {
		t.Errorf("agent %s: %+v on %+v, want the host's %s, DirectoryOrCreate, writable", wireguardDir, vm, vol, wireguardDir)
	}
	for _, v := range p.spec.Volumes {
		if hp := v.HostPath; hp != nil && (path.Clean(hp.Path) == "/dev/net/tun" || hp.Type != nil && *hp.Type == corev1.HostPathCharDev) {
			t.Errorf("volume %s: hostPath %s: the privileged agent has the host's devices, and a device that is not there yet would keep the pod from starting", v.Name, hp.Path)
		}
	}
}}

func agentRefuses(s agent.Settings) bool { return len(s.Check()) > 0 }

// TestShippedEncryptionNone: every shipped variant leaves encryption off.
func TestShippedEncryptionNone(t *testing.T) {
	for _, v := range variants {
		cm := loadFrom(t, v.dir).configMaps["podnet-config"]
		if cm == nil || cm.Data[encryptionKey] != agent.EncryptionNone {
			t.Errorf("%s: ConfigMap podnet-config's %s is not %q", v.name, encryptionKey, agent.EncryptionNone)
		}
	}
}

// TestChartWireGuard: ci/wireguard-values.yaml renders encryption
// wireguard into the ConfigMap and its port into the agent's arguments;
// encryption.type alone keeps the default port.
func TestChartWireGuard(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		port string
	}{
		{"ci/wireguard-values.yaml", ciValues(t, "wireguard-values.yaml", nil), "51999"},
		{"type only", map[string]any{"encryption": map[string]any{"type": "wireguard"}}, "51871"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := renderedPod(t, tc.vals)
			runChecks(t, p, podChecks())
			if v := p.m.configMaps["podnet-config"].Data[encryptionKey]; v != agent.EncryptionWireGuard {
				t.Errorf("ConfigMap's %s %q, want %s", encryptionKey, v, agent.EncryptionWireGuard)
			}
			if v, _ := p.expandedFlag(t, p.agent, "encryption"); v != agent.EncryptionWireGuard {
				t.Errorf("agent --encryption=%s, want %s", v, agent.EncryptionWireGuard)
			}
			if v, _ := p.expandedFlag(t, p.agent, "wireguard-port"); v != tc.port {
				t.Errorf("agent --wireguard-port=%s, want %s", v, tc.port)
			}
		})
	}
}
