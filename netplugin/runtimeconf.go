package netplugin

import (
	"strings"

	"github.com/podnet/podnet/cni"
)

// buildRuntimeConf builds an attachment's runtime configuration as kubelet
// does: the pod's identity in CNI_ARGS (IgnoreUnknown so plugins that do
// not know the keys accept them), and no capability args; the default
// network's come from capabilityArgs.
func buildRuntimeConf(pod PodRef, sandboxID, netnsPath, ifName string) *cni.RuntimeConf {
	args := [][2]string{
		{"IgnoreUnknown", "1"},
		{"K8S_POD_NAMESPACE", pod.Namespace},
		{"K8S_POD_NAME", pod.Name},
		{"K8S_POD_INFRA_CONTAINER_ID", sandboxID},
	}
	if pod.UID != "" {
		args = append(args, [2]string{"K8S_POD_UID", pod.UID})
	}
	return &cni.RuntimeConf{
		ContainerID:    sandboxID,
		NetNS:          netnsPath,
		IfName:         ifName,
		Args:           args,
		CapabilityArgs: map[string]any{},
	}
}

// capabilityArgs are the pod's options, and the pod CIDR as ipRanges when
// there is one, as kubelet passes them.
func capabilityArgs(opts *PodOptions, podCIDR string) map[string]any {
	caps := map[string]any{}
	if opts != nil {
		mappings := make([]PortMapping, 0, len(opts.PortMappings))
		for _, m := range opts.PortMappings {
			m.Protocol = strings.ToLower(m.Protocol)
			if m.Protocol == "" {
				m.Protocol = "tcp"
			}
			mappings = append(mappings, m)
		}
		caps["portMappings"] = mappings
		if opts.Bandwidth != nil {
			caps["bandwidth"] = opts.Bandwidth
		}
		if opts.DNS != nil {
			caps["dns"] = opts.DNS
		}
	}
	if podCIDR != "" {
		caps["ipRanges"] = [][]map[string]string{{{"subnet": podCIDR}}}
	}
	return caps
}
