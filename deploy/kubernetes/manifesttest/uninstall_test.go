package manifesttest

import (
	"maps"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// uninstallDir is the DaemonSet a user applies after deleting podnet's
// own, to remove podnet from every node.
const uninstallDir = "../uninstall"

// uninstallPaths are `podnet uninstall`'s directory flags and the host
// directories each must be: podnet's DaemonSets' hostPaths (and
// nodeclean's defaults; TestUninstallFlags runs the CLI, which names
// them in its help).
var uninstallPaths = map[string]string{
	"conf-dir":  hostConfDir,
	"bin-dir":   hostBinDir,
	"state-dir": "/var/lib/podnet",
	"run-dir":   "/run/podnet",
	// Only podnet.wg.sock in it is podnet's.
	"wireguard-dir": wireguardDir,
}

// uninstallPod is the uninstall DaemonSet's pod and its one container.
func uninstallPod(t *testing.T) (*pod, *corev1.Container) {
	t.Helper()
	m := loadFrom(t, uninstallDir)
	if len(m.daemonSets) != 1 {
		t.Fatalf("%d DaemonSets, want 1", len(m.daemonSets))
	}
	ds := m.daemonSets[0]
	p := &pod{m: m, ds: ds, spec: &ds.Spec.Template.Spec}
	if len(p.spec.Containers) != 1 || len(p.spec.InitContainers) != 0 {
		t.Fatalf("want one container, no init container")
	}
	return p, &p.spec.Containers[0]
}

func TestUninstallDaemonSet(t *testing.T) {
	p, c := uninstallPod(t)
	def := loadPodFrom(t, defaultDir)
	if p.ds.Name == def.ds.Name || p.ds.Spec.Selector.MatchLabels["app.kubernetes.io/name"] == def.ds.Spec.Selector.MatchLabels["app.kubernetes.io/name"] {
		t.Errorf("DaemonSet %s selects %v: it must be neither podnet's DaemonSet nor select its pods", p.ds.Name, p.ds.Spec.Selector.MatchLabels)
	}
	if c.Image != def.agent.Image {
		t.Errorf("image %q, podnet's DaemonSet runs %q: the uninstall must be the same build", c.Image, def.agent.Image)
	}
	if !slices.ContainsFunc(p.spec.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == ""
	}) {
		t.Errorf("no toleration {operator: Exists}: %+v", p.spec.Tolerations)
	}
	if !p.spec.HostNetwork {
		t.Error("hostNetwork is not true: podnet's links, routes and tables are the host's")
	}
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Error("not privileged: it needs NET_ADMIN and a writable /proc/sys")
	}
	args := podnetArgs(c)
	if len(args) == 0 || args[0] != "uninstall" || !slices.Contains(args, "--hold") {
		t.Errorf("runs %q, want podnet uninstall --hold", argv(c))
	}
	for flag, dir := range uninstallPaths {
		p.hostDir(t, c, flag, dir)
	}
	probe := c.ReadinessProbe
	if probe == nil || probe.Exec == nil {
		t.Fatal("no exec readiness probe")
	}
	pargs := probe.Exec.Command
	if len(pargs) < 3 || pargs[0] != c.Command[0] || pargs[1] != "uninstall" || !slices.Contains(pargs, "--verify") {
		t.Fatalf("readiness probe runs %q, want %s uninstall --verify", pargs, c.Command[0])
	}
	for _, flag := range append(slices.Collect(maps.Keys(uninstallPaths)), "datastore", "ipam") {
		v, _ := flagValue(args, flag)
		if pv, _ := flagValue(pargs, flag); pv != v {
			t.Errorf("readiness probe --%s=%q, the container's is %q: it must verify what was cleaned", flag, pv, v)
		}
	}
	for _, a := range slices.Concat(args, pargs) {
		if strings.Contains(a, "$(") {
			t.Errorf("%q: no env var to expand", a)
		}
	}
}

// TestUninstallFlags runs the CLI built from the main module with the
// DaemonSet's arguments and its probe's, plus --help: cobra refuses a
// flag podnet uninstall does not have before it shows the help.
func TestUninstallFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds podnet")
	}
	_, c := uninstallPod(t)
	cliDir := t.TempDir()
	goBuild(t, cliDir, "./cmd/podnet")
	podnet := filepath.Join(cliDir, "podnet")
	for _, args := range [][]string{podnetArgs(c), c.ReadinessProbe.Exec.Command[1:]} {
		out, err := exec.Command(podnet, append(slices.Clone(args), "--help")...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "podnet uninstall") {
			t.Errorf("podnet %q: %v\n%s", args, err, out)
		}
		// The defaults are the host's directories the DaemonSet mounts.
		for _, dir := range uninstallPaths {
			if !strings.Contains(string(out), `(default "`+dir+`")`) {
				t.Errorf("podnet uninstall --help names no default %s", dir)
			}
		}
	}
}

// uninstallRules are the verbs `podnet uninstall --datastore kubernetes
// --ipam blocks` sends (test/k8s TestUninstallAPI records them against a
// real API server): its Node's annotations, its IPAMNode and blocks.
var uninstallRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}},
	{APIGroups: []string{"podnet.io"}, Resources: []string{"ipamnodes"}, Verbs: []string{"get", "update", "delete"}},
	{APIGroups: []string{"podnet.io"}, Resources: []string{"ipamblocks"}, Verbs: []string{"get", "update", "delete"}},
}

// TestUninstallAPIAccess: with --datastore kubernetes the pod runs as an
// account of its own, bound to exactly uninstallRules, its token mounted
// by this pod alone, and names its Node through the downward API.
func TestUninstallAPIAccess(t *testing.T) {
	p, c := uninstallPod(t)
	args := podnetArgs(c)
	if v, _ := flagValue(args, "datastore"); v != "kubernetes" {
		t.Fatalf("--datastore=%q: want kubernetes, so that the Node's podnet.io/ annotations go too", v)
	}
	if v, _ := flagValue(args, "node"); v != "" {
		t.Errorf("--node=%s: want none ($NODE_NAME)", v)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == nodeNameEnv && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == nodeNamePath
	}) {
		t.Errorf("env %s must come from fieldRef %s", nodeNameEnv, nodeNamePath)
	}
	sa := p.spec.ServiceAccountName
	if p.spec.AutomountServiceAccountToken == nil || !*p.spec.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken is not true on the pod")
	}
	if acct := p.m.serviceAccounts[sa]; len(p.m.serviceAccounts) != 1 || acct == nil ||
		acct.AutomountServiceAccountToken == nil || *acct.AutomountServiceAccountToken {
		t.Errorf("service accounts %v: want %q alone, with automountServiceAccountToken false", slices.Sorted(maps.Keys(p.m.serviceAccounts)), sa)
	}
	def := loadPodFrom(t, defaultDir)
	if sa == def.spec.ServiceAccountName {
		t.Errorf("runs as %s, podnet's agent's account: deleting podnet would delete it", sa)
	}
	if len(p.m.clusterRoles) != 1 || len(p.m.roleBindings) != 1 || len(p.m.roles)+len(p.m.nsRoleBindings) != 0 {
		t.Fatalf("want one ClusterRole and one ClusterRoleBinding")
	}
	for _, b := range p.m.roleBindings {
		if want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: namespace}}; !reflect.DeepEqual(b.Subjects, want) {
			t.Errorf("ClusterRoleBinding %s binds %+v, want %s/%s alone", b.Name, b.Subjects, namespace, sa)
		}
		role := p.m.clusterRoles[b.RoleRef.Name]
		if role == nil || b.RoleRef.Kind != "ClusterRole" {
			t.Fatalf("ClusterRoleBinding %s: roleRef %+v is not a ClusterRole of the manifests", b.Name, b.RoleRef)
		}
		if !reflect.DeepEqual(role.Rules, uninstallRules) || role.AggregationRule != nil {
			t.Errorf("ClusterRole %s: rules %+v, want %+v", role.Name, role.Rules, uninstallRules)
		}
		if role.Name == "podnet" || b.Name == "podnet" {
			t.Errorf("ClusterRole %s, binding %s: podnet's own names", role.Name, b.Name)
		}
	}
}

// TestAgentSysctlRecordOnHost: every variant's agent records the sysctls
// it changes (--sysctl-record, by default /var/lib/podnet/sysctls.json)
// on the host's /var/lib/podnet, where the uninstall DaemonSet reads it:
// a record in the container's own filesystem would be lost, and removal
// could not restore what podnet changed.
func TestAgentSysctlRecordOnHost(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			p := loadPodFrom(t, v.dir)
			rec, ok := flagValue(argv(p.agent), "sysctl-record")
			if !ok {
				rec = "/var/lib/podnet/sysctls.json"
			}
			vm, vol := p.volumeAt(p.agent, rec)
			if vol == nil || vol.HostPath == nil || vm.ReadOnly {
				t.Fatalf("agent --sysctl-record=%s: not on a writable hostPath volume", rec)
			}
			if host := filepath.Join(vol.HostPath.Path, strings.TrimPrefix(rec, vm.MountPath)); filepath.Dir(host) != uninstallPaths["state-dir"] {
				t.Errorf("agent --sysctl-record=%s is %s on the host, outside %s where podnet uninstall reads it", rec, host, uninstallPaths["state-dir"])
			}
		})
	}
}
