package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/podnet/podnet/internal/testutil"
)

// TestKubeRouterManifests: kuberouter.yaml decodes strictly and runs the
// policy controller alone, on the cluster's Service range, from the
// image InstallKubeRouter loads, in the host network, privileged, told
// its node by NODE_NAME.
func TestKubeRouterManifests(t *testing.T) {
	m, err := kubeRouterManifests()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.ServiceAccounts) != 1 || len(m.ClusterRoles) != 1 || len(m.ClusterRoleBindings) != 1 {
		t.Fatalf("want one service account, role and binding, got %d, %d, %d",
			len(m.ServiceAccounts), len(m.ClusterRoles), len(m.ClusterRoleBindings))
	}
	ds := m.DaemonSet
	if ds.Name != KubeRouterDaemonSet || ds.Namespace != KubeRouterNamespace {
		t.Errorf("daemonset %s/%s, want %s/%s", ds.Namespace, ds.Name, KubeRouterNamespace, KubeRouterDaemonSet)
	}
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || spec.ServiceAccountName != m.ServiceAccounts[0].Name || len(spec.Containers) != 1 {
		t.Fatalf("pod spec: hostNetwork %v, service account %q, %d containers", spec.HostNetwork, spec.ServiceAccountName, len(spec.Containers))
	}
	ctr := spec.Containers[0]
	if ctr.Image != KubeRouterImage || ctr.SecurityContext == nil || ctr.SecurityContext.Privileged == nil || !*ctr.SecurityContext.Privileged {
		t.Errorf("container: image %q (want %q), security context %+v", ctr.Image, KubeRouterImage, ctr.SecurityContext)
	}
	for _, want := range []string{
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
		"--service-cluster-ip-range=" + ServiceCIDR, "--metrics-port=" + strconv.Itoa(KubeRouterMetricsPort),
	} {
		if !slices.Contains(ctr.Args, want) {
			t.Errorf("args %q lack %s", ctr.Args, want)
		}
	}
	if len(ctr.Env) == 0 || ctr.Env[0].Name != "NODE_NAME" || ctr.Env[0].ValueFrom == nil || ctr.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("env %+v: want NODE_NAME from spec.nodeName", ctr.Env)
	}
}

// TestKubeRouterImageTools unpacks the image's files (a stand-in for
// kube-router itself) and runs the programs kube-router execs from it,
// chrooted, in a network namespace of their own: iptables (nft) writes
// and saves a rule matching an ipset that ipset created, so every
// extension and library they load is in the image.
func TestKubeRouterImageTools(t *testing.T) {
	testutil.RequireRoot(t)
	if err := ensureIPSet(t.Logf); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(t.TempDir(), "kube-router")
	if err := os.WriteFile(fake, []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := kubeRouterImage(fake)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, f := range img.Files {
		p := filepath.Join(root, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, f.Mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range img.Symlinks {
		if err := os.Symlink(l.Target, filepath.Join(root, l.Path)); err != nil {
			t.Fatal(err)
		}
	}
	script := "ipset create kr-test hash:ip && ipset add kr-test 10.244.1.2 && " +
		"iptables -t filter -N KR-TEST && " +
		"iptables -t filter -A KR-TEST -m set --match-set kr-test src -m comment --comment kr -j ACCEPT && " +
		"iptables-save -t filter && ipset list kr-test"
	// unshare -n: the rules and the set go with the namespace. Each
	// command chrooted on its own: the image has no shell.
	cmd := exec.Command("unshare", "-n", "sh", "-c", chrootEach(root, script))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("iptables and ipset in the image: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--match-set kr-test src") || !strings.Contains(string(out), "10.244.1.2") {
		t.Fatalf("the rule or the set is missing:\n%s", out)
	}
}

// chrootEach prefixes every command of an &&-chain with chroot root.
func chrootEach(root, script string) string {
	parts := strings.Split(script, " && ")
	for i, p := range parts {
		parts[i] = "chroot " + root + " /usr/sbin/" + p
	}
	return strings.Join(parts, " && ")
}

// TestGoInstallPresent: a cached install is reused only when every
// program is there and executable.
func TestGoInstallPresent(t *testing.T) {
	g := goInstall{pkgs: []string{"example.com/m/cmd/a", "example.com/m/cmd/b"}}
	bin := t.TempDir()
	if g.present(bin) {
		t.Fatal("present in an empty directory")
	}
	if err := os.WriteFile(filepath.Join(bin, "a"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "b"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if g.present(bin) {
		t.Fatal("present with b not executable")
	}
	if err := os.Chmod(filepath.Join(bin, "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if !g.present(bin) {
		t.Fatal("not present with both there")
	}
}
