package manifesttest

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
	for flag := range uninstallPaths {
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
