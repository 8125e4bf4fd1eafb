package k8s

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/podnet/podnet/agent"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestCNICredentials: the kubeconfig the agent writes for the plugins
// authenticates, against a real kube-apiserver, as the plugins' own
// service account, with a token from the TokenRequest API that a renewal
// replaces; both files are private to root.
func TestCNICredentials(t *testing.T) {
	c := cluster.Start(t, cluster.WithControlPlaneOnly())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "podnet-cni", Namespace: "kube-system"}}
	if _, err := c.Client.CoreV1().ServiceAccounts("kube-system").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	creds := &agent.CNICredentials{REST: c.Config, Namespace: "kube-system", ServiceAccount: "podnet-cni",
		Dir: dir, TTL: 10 * time.Minute, Log: slog.Default()}
	expiry, err := creds.WriteOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(expiry); left < 9*time.Minute || left > 11*time.Minute {
		t.Errorf("token expires in %s, asked for 10m", left)
	}
	for _, name := range []string{agent.CNIKubeconfigName, agent.CNITokenName} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", name, err, fi.Mode())
		}
	}
	whoamiIn := func(dir string) string {
		t.Helper()
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, agent.CNIKubeconfigName))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Dial = c.DialContext // the API server is reachable from the node's namespace
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status.UserInfo.Username
	}
	whoami := func() string { t.Helper(); return whoamiIn(dir) }
	if got, want := whoami(), "system:serviceaccount:kube-system:podnet-cni"; got != want {
		t.Fatalf("the plugins' kubeconfig authenticates as %q, want %q", got, want)
	}
	// The agent writes the files where its container mounts the host's
	// CNI config directory, the plugins read them on the host: the
	// kubeconfig must work from another path. Moved, it still does.
	moved := filepath.Join(t.TempDir(), "net.d")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	if got := whoamiIn(moved); got != "system:serviceaccount:kube-system:podnet-cni" {
		t.Fatalf("the plugins' kubeconfig, moved to another directory, authenticates as %q", got)
	}
	if err := os.Rename(moved, dir); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(filepath.Join(dir, agent.CNITokenName))
	if _, err := creds.WriteOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if second, _ := os.ReadFile(filepath.Join(dir, agent.CNITokenName)); string(second) == string(first) {
		t.Error("a renewal kept the same token")
	}
	if got := whoami(); got != "system:serviceaccount:kube-system:podnet-cni" {
		t.Errorf("after renewal: %q", got)
	}
	// A service account that does not exist: a clear error, no files touched.
	bad := *creds
	bad.ServiceAccount, bad.Dir = "nobody", t.TempDir()
	if _, err := bad.WriteOnce(ctx); err == nil {
		t.Error("token of a missing service account: no error")
	} else {
		t.Logf("missing service account: %v", err)
	}
	if ents, _ := os.ReadDir(bad.Dir); len(ents) != 0 {
		t.Errorf("a failed request left %v", ents)
	}
}
