package manifesttest

import (
	"fmt"
	"net"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The containers the DaemonSet must have, and the host directories the
// kubelet and the container runtime read CNI plugins and configs from.
const (
	initName     = "install-cni"
	agentName    = "agent"
	hostBinDir   = "/opt/cni/bin"
	hostConfDir  = "/etc/cni/net.d"
	nodeNameEnv  = "NODE_NAME"
	nodeNamePath = "spec.nodeName"
)

// pod is the DaemonSet's pod template with its two containers found.
type pod struct {
	m     *manifests
	ds    *appsv1.DaemonSet
	spec  *corev1.PodSpec
	init  *corev1.Container
	agent *corev1.Container
}

// loadPodFrom finds the DaemonSet's pod among the manifests in dir.
func loadPodFrom(t *testing.T, dir string) *pod {
	t.Helper()
	return podOf(t, loadFrom(t, dir))
}

// podOf finds the DaemonSet's pod among m.
func podOf(t *testing.T, m *manifests) *pod {
	t.Helper()
	if len(m.daemonSets) != 1 {
		t.Fatalf("%d DaemonSets, want 1", len(m.daemonSets))
	}
	ds := m.daemonSets[0]
	p := &pod{m: m, ds: ds, spec: &ds.Spec.Template.Spec}
	p.init = findContainer(p.spec.InitContainers, initName)
	p.agent = findContainer(p.spec.Containers, agentName)
	if p.init == nil || p.agent == nil {
		t.Fatalf("DaemonSet %s: want init container %q and container %q", ds.Name, initName, agentName)
	}
	return p
}

func findContainer(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

// argv is what the container runs: command, then args.
func argv(c *corev1.Container) []string { return slices.Concat(c.Command, c.Args) }

// flagValue finds --name=value or --name value among args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// podnetArgs returns the arguments after the podnet binary, which the
// command names (or the image's entrypoint, when there is no command).
func podnetArgs(c *corev1.Container) []string {
	if len(c.Command) > 0 {
		return argv(c)[1:]
	}
	return argv(c)
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces $(VAR) as the kubelet does, with the values the env
// entries get from literals and from the manifests' ConfigMaps. A
// reference it cannot resolve is an error (the kubelet would leave it in
// the argument as it is).
func (p *pod) expand(c *corev1.Container, s string) (string, error) {
	var err error
	out := envRef.ReplaceAllStringFunc(s, func(ref string) string {
		name := envRef.FindStringSubmatch(ref)[1]
		v, e := p.envValue(c, name)
		if e != nil && err == nil {
			err = e
		}
		return v
	})
	return out, err
}

func (p *pod) envValue(c *corev1.Container, name string) (string, error) {
	for _, e := range c.Env {
		if e.Name != name {
			continue
		}
		switch {
		case e.ValueFrom == nil:
			return e.Value, nil
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm := p.m.configMaps[ref.Name]
			if cm == nil {
				return "", fmt.Errorf("env %s: no ConfigMap %q", name, ref.Name)
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				return "", fmt.Errorf("env %s: ConfigMap %q has no key %q", name, ref.Name, ref.Key)
			}
			return v, nil
		}
		return "$(" + name + ")", nil // known only on the node
	}
	return "", fmt.Errorf("$(%s): no such env var in container %s", name, c.Name)
}

// expandedFlag is flagValue with $(VAR) expanded.
func (p *pod) expandedFlag(t *testing.T, c *corev1.Container, name string) (string, bool) {
	t.Helper()
	v, ok := flagValue(argv(c), name)
	if !ok {
		return "", false
	}
	v, err := p.expand(c, v)
	if err != nil {
		t.Errorf("container %s --%s: %v", c.Name, name, err)
	}
	return v, true
}

// volumeAt returns the mount of c whose mountPath holds file (the deepest
// one), and its volume.
func (p *pod) volumeAt(c *corev1.Container, file string) (*corev1.VolumeMount, *corev1.Volume) {
	var best *corev1.VolumeMount
	for i, vm := range c.VolumeMounts {
		if (file == vm.MountPath || strings.HasPrefix(file, vm.MountPath+"/")) &&
			(best == nil || len(vm.MountPath) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	if best == nil {
		return nil, nil
	}
	for i, v := range p.spec.Volumes {
		if v.Name == best.Name {
			return best, &p.spec.Volumes[i]
		}
	}
	return best, nil
}

// hostDir checks that flag's directory is the host's dir itself, mounted
// writable.
func (p *pod) hostDir(t *testing.T, c *corev1.Container, flag, dir string) {
	t.Helper()
	v, ok := flagValue(argv(c), flag)
	if !ok {
		t.Errorf("container %s: no --%s", c.Name, flag)
		return
	}
	vm, vol := p.volumeAt(c, v)
	switch {
	case vol == nil || vol.HostPath == nil:
		t.Errorf("container %s --%s=%s: not on a hostPath volume", c.Name, flag, v)
	case vm.MountPath != v || path.Clean(vol.HostPath.Path) != dir:
		t.Errorf("container %s --%s=%s: is %s%s on the host, want %s", c.Name, flag, v,
			vol.HostPath.Path, strings.TrimPrefix(v, vm.MountPath), dir)
	case vm.ReadOnly:
		t.Errorf("container %s --%s=%s: mounted read-only", c.Name, flag, v)
	}
}

// networkConfig finds the ConfigMap key the agent's --network-config
// file comes from.
func (p *pod) networkConfig() (cm *corev1.ConfigMap, key string, err error) {
	file, ok := flagValue(argv(p.agent), "network-config")
	if !ok {
		return nil, "", fmt.Errorf("agent: no --network-config")
	}
	vm, vol := p.volumeAt(p.agent, file)
	if vol == nil || vol.ConfigMap == nil {
		return nil, "", fmt.Errorf("agent --network-config=%s: not on a ConfigMap volume", file)
	}
	if cm = p.m.configMaps[vol.ConfigMap.Name]; cm == nil {
		return nil, "", fmt.Errorf("volume %s: no ConfigMap %q among the manifests", vol.Name, vol.ConfigMap.Name)
	}
	rel := strings.TrimPrefix(file, vm.MountPath+"/")
	key = rel
	if len(vol.ConfigMap.Items) > 0 {
		key = ""
		for _, it := range vol.ConfigMap.Items {
			if it.Path == rel {
				key = it.Key
			}
		}
		if key == "" {
			return nil, "", fmt.Errorf("volume %s: no item has path %q", vol.Name, rel)
		}
	}
	if _, ok := cm.Data[key]; !ok {
		return nil, "", fmt.Errorf("ConfigMap %s has no key %q (agent --network-config=%s)", cm.Name, key, file)
	}
	return cm, key, nil
}

// metricsPort is the port of the agent's --metrics-addr.
func (p *pod) metricsPort(t *testing.T) int32 {
	t.Helper()
	addr, ok := p.expandedFlag(t, p.agent, "metrics-addr")
	if !ok {
		t.Fatal("agent: no --metrics-addr (the probes need it)")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("agent --metrics-addr=%s: %v", addr, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		t.Fatalf("agent --metrics-addr=%s: want a fixed port", addr)
	}
	return int32(n)
}

func (p *pod) probePort(c *corev1.Container, port intstr.IntOrString) (int32, error) {
	if port.Type == intstr.Int {
		return port.IntVal, nil
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return cp.ContainerPort, nil
		}
	}
	return 0, fmt.Errorf("no container port named %q", port.StrVal)
}

// podCheck is one check of a DaemonSet's pod.
type podCheck struct {
	name  string
	check func(t *testing.T, p *pod)
}

func runChecks(t *testing.T, p *pod, checks []podCheck) {
	for _, tt := range checks {
		t.Run(tt.name, func(t *testing.T) { tt.check(t, p) })
	}
}

// podChecks are what every podnet DaemonSet must be, whatever its
// datastore.
func podChecks() []podCheck {
	return []podCheck{
		encryptionCheck,
		{"tolerates every taint", func(t *testing.T, p *pod) {
			for _, tol := range p.spec.Tolerations {
				if tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == "" {
					return
				}
			}
			t.Errorf("no toleration {operator: Exists} without key and effect: %+v", p.spec.Tolerations)
		}},
		{"host network, node resolver", func(t *testing.T, p *pod) {
			if !p.spec.HostNetwork {
				t.Error("hostNetwork is not true")
			}
			if p.spec.DNSPolicy != corev1.DNSDefault {
				t.Errorf("dnsPolicy %q, want %q: cluster DNS runs on the network podnet provides", p.spec.DNSPolicy, corev1.DNSDefault)
			}
		}},
		{"critical, one node at a time", func(t *testing.T, p *pod) {
			if p.spec.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName %q", p.spec.PriorityClassName)
			}
			us := p.ds.Spec.UpdateStrategy
			if us.Type != appsv1.RollingUpdateDaemonSetStrategyType || us.RollingUpdate == nil ||
				us.RollingUpdate.MaxUnavailable == nil || *us.RollingUpdate.MaxUnavailable != intstr.FromInt32(1) {
				t.Errorf("updateStrategy %+v, want RollingUpdate with maxUnavailable 1", us)
			}
			if p.spec.TerminationGracePeriodSeconds == nil {
				t.Error("no terminationGracePeriodSeconds")
			}
		}},
		{"selector matches the template", func(t *testing.T, p *pod) {
			for k, v := range p.ds.Spec.Selector.MatchLabels {
				if p.ds.Spec.Template.Labels[k] != v {
					t.Errorf("selector %s=%s: template has %q", k, v, p.ds.Spec.Template.Labels[k])
				}
			}
		}},
		{"one image", func(t *testing.T, p *pod) {
			if p.init.Image == "" || p.init.Image != p.agent.Image {
				t.Errorf("images %q and %q: the plugins installed must come from the agent's build", p.init.Image, p.agent.Image)
			}
		}},
		{"install-cni installs plugins only", func(t *testing.T, p *pod) {
			args := podnetArgs(p.init)
			if len(args) == 0 || args[0] != "install" || !slices.Contains(args, "--no-config") {
				t.Errorf("init container runs %q, want podnet install --no-config", argv(p.init))
			}
			p.hostDir(t, p.init, "bin-dir", hostBinDir)
			for _, vm := range p.init.VolumeMounts {
				if _, vol := p.volumeAt(p.init, vm.MountPath); vol != nil && vol.HostPath != nil && path.Clean(vol.HostPath.Path) == hostConfDir {
					t.Errorf("init container mounts the host's %s: only the agent may write the config", hostConfDir)
				}
			}
			src, _ := flagValue(argv(p.init), "src-dir")
			if asrc, _ := flagValue(argv(p.agent), "src-dir"); src != asrc {
				t.Errorf("--src-dir: init %q, agent %q", src, asrc)
			}
		}},
		{"agent installs the config when ready", func(t *testing.T, p *pod) {
			args := podnetArgs(p.agent)
			if len(args) == 0 || args[0] != "agent" {
				t.Fatalf("agent container runs %q, want podnet agent", argv(p.agent))
			}
			if !slices.Contains(args, "--install") {
				t.Error("agent without --install: nothing would write the network config")
			}
			// Uninstalling on every exit would take each node out of
			// service (no config: NotReady) on every rollout.
			if slices.Contains(args, "--uninstall-on-exit") {
				t.Error("agent with --uninstall-on-exit")
			}
			// The agent logs its start, registration, install and GC at
			// info; at the CLI's default, warn, a healthy node's agent
			// log is empty.
			if v, _ := flagValue(args, "log-level"); v != "info" && v != "debug" {
				t.Errorf("agent --log-level=%q: want info (or debug), so that its log says what it did", v)
			}
			p.hostDir(t, p.agent, "bin-dir", hostBinDir)
			p.hostDir(t, p.agent, "conf-dir", hostConfDir)
			if _, _, err := p.networkConfig(); err != nil {
				t.Error(err)
			}
		}},
		{"agent node name from the downward API", func(t *testing.T, p *pod) {
			found := false
			for _, e := range p.agent.Env {
				if e.Name == nodeNameEnv {
					found = e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == nodeNamePath
				}
			}
			if !found {
				t.Errorf("agent: env %s must come from fieldRef %s", nodeNameEnv, nodeNamePath)
			}
			if v, ok := flagValue(argv(p.agent), "node"); ok && v != "$("+nodeNameEnv+")" {
				t.Errorf("agent --node=%s: want $(%s) or no flag", v, nodeNameEnv)
			}
		}},
		{"env references resolve", func(t *testing.T, p *pod) {
			for _, c := range []*corev1.Container{p.init, p.agent} {
				for _, a := range argv(c) {
					if _, err := p.expand(c, a); err != nil {
						t.Errorf("container %s: %v", c.Name, err)
					}
				}
				for _, e := range c.Env {
					if e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil {
						continue
					}
					if ref := e.ValueFrom.ConfigMapKeyRef; ref.Optional == nil || !*ref.Optional {
						if _, err := p.envValue(c, e.Name); err != nil {
							t.Errorf("container %s: %v", c.Name, err)
						}
					}
				}
			}
		}},
		{"probes on the metrics port", func(t *testing.T, p *pod) {
			want := p.metricsPort(t)
			for _, pr := range []struct {
				kind, path string
				probe      *corev1.Probe
			}{
				{"liveness", "/healthz", p.agent.LivenessProbe},
				{"readiness", "/readyz", p.agent.ReadinessProbe},
			} {
				if pr.probe == nil || pr.probe.HTTPGet == nil {
					t.Errorf("agent: no HTTP %s probe", pr.kind)
					continue
				}
				g := pr.probe.HTTPGet
				port, err := p.probePort(p.agent, g.Port)
				if err != nil {
					t.Errorf("agent %s probe: %v", pr.kind, err)
				}
				if g.Path != pr.path || port != want || (g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP) {
					t.Errorf("agent %s probe: %s %s port %d, want HTTP %s on the --metrics-addr port %d", pr.kind, g.Scheme, g.Path, port, pr.path, want)
				}
			}
		}},
		{"privileged agent", func(t *testing.T, p *pod) {
			if sc := p.agent.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
				t.Error("agent is not privileged: it needs NET_ADMIN, SYS_ADMIN and a writable /proc/sys")
			}
		}},
		{"resource requests", func(t *testing.T, p *pod) {
			for _, c := range []*corev1.Container{p.init, p.agent} {
				if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
					t.Errorf("container %s: no cpu and memory requests", c.Name)
				}
			}
		}},
		{"volumes and mounts match", func(t *testing.T, p *pod) {
			used := map[string]bool{}
			for _, c := range slices.Concat(p.spec.InitContainers, p.spec.Containers) {
				for _, vm := range c.VolumeMounts {
					used[vm.Name] = true
					if !slices.ContainsFunc(p.spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name }) {
						t.Errorf("container %s mounts %q: no such volume", c.Name, vm.Name)
					}
					if vm.MountPropagation != nil && *vm.MountPropagation == corev1.MountPropagationBidirectional {
						t.Errorf("container %s mount %s: Bidirectional, but podnet creates no mounts the host must see", c.Name, vm.Name)
					}
				}
			}
			for _, v := range p.spec.Volumes {
				if !used[v.Name] {
					t.Errorf("volume %s: mounted by no container", v.Name)
				}
			}
		}},
	}
}
