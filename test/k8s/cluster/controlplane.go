package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// setupPKI issues the cluster's certificates and gives the test and the
// components their credentials: a kubeconfig file for the components,
// Config and Client for the test.
func (c *Cluster) setupPKI() error {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return err
	}
	c.pki = p
	if _, _, err := p.issue("apiserver", "kube-apiserver", nil,
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(NodeIP), net.ParseIP(KubernetesServiceIP)},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}, true); err != nil {
		return err
	}
	// One system:masters identity for the test, the controllers, kubelet
	// and the apiserver's calls to kubelet: this cluster tests networking,
	// not authorization.
	cert, key, err := p.issue("admin", "podnet-k8s-admin", []string{"system:masters"}, nil, nil, false)
	if err != nil {
		return err
	}
	// kube-proxy's own identity, which the bootstrap RBAC policy binds
	// to system:node-proxier.
	if _, _, err := p.issue("kube-proxy", "system:kube-proxy", nil, nil, nil, false); err != nil {
		return err
	}
	if err := p.serviceAccountKey(); err != nil {
		return err
	}
	if err := c.writeKubeconfig(); err != nil {
		return err
	}
	c.Config = &rest.Config{
		Host:            "https://" + apiserverAddr(),
		TLSClientConfig: rest.TLSClientConfig{CAData: p.caPEM, CertData: cert, KeyData: key},
		Dial:            c.Nodes[0].DialContext, // the API server listens in the first node's namespace
		QPS:             100,
		Burst:           200,
	}
	c.Client, err = kubernetes.NewForConfig(c.Config)
	return err
}

// writeKubeconfig writes the admin identity's kubeconfig, which the
// controllers and every node's kubelet use: the API server's address is
// the first node's underlay address.
func (c *Cluster) writeKubeconfig() error { return c.writeKubeconfigFor(c.kubeconfig(), "admin") }

// writeKubeconfigFor writes a kubeconfig at path that authenticates with
// the client certificate pki issued as cert (cert.crt, cert.key).
func (c *Cluster) writeKubeconfigFor(path, cert string) error {
	p := c.pki
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: podnet
  cluster:
    server: https://%[1]s
    certificate-authority: %[2]s
users:
- name: %[3]s
  user:
    client-certificate: %[4]s
    client-key: %[5]s
contexts:
- name: podnet
  context: {cluster: podnet, user: %[3]s}
current-context: podnet
`, apiserverAddr(), p.path("ca.crt"), cert, p.path(cert+".crt"), p.path(cert+".key"))
	return os.WriteFile(path, []byte(kubeconfig), 0o600)
}

func apiserverAddr() string { return net.JoinHostPort(NodeIP, apiserverPort) }

func (c *Cluster) kubeconfig() string { return filepath.Join(c.Dir, "admin.kubeconfig") }

// startEtcd starts etcd as a re-execution of the test binary (see
// MaybeRunEtcd) and waits for its health endpoint.
func (c *Cluster) startEtcd() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := c.start("etcd", c.controlPlane(), []string{etcdRoleEnv + "=" + filepath.Join(c.Dir, "etcd")}, self); err != nil {
		return err
	}
	hc := c.Nodes[0].HTTPClient(2 * time.Second)
	return c.waitFor("etcd", time.Minute, func() error {
		resp, err := hc.Get("http://" + EtcdEndpoint + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
}

func (c *Cluster) startAPIServer() error {
	p := c.pki
	// Every address of the first node's namespace: the underlay one for
	// other nodes' kubelets and agents, loopback for the controllers.
	err := c.start("kube-apiserver", c.controlPlane(), nil, filepath.Join(c.kubeBin, "kube-apiserver"),
		"--etcd-servers=http://"+EtcdEndpoint,
		"--bind-address=0.0.0.0", "--secure-port="+apiserverPort, "--advertise-address="+NodeIP,
		"--tls-cert-file="+p.path("apiserver.crt"), "--tls-private-key-file="+p.path("apiserver.key"),
		"--client-ca-file="+p.path("ca.crt"),
		"--kubelet-client-certificate="+p.path("admin.crt"), "--kubelet-client-key="+p.path("admin.key"),
		// kubelet's address is the node's underlay address; this keeps
		// exec and logs working whatever addresses kubelet reports.
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--service-account-key-file="+p.path("sa.pub"),
		"--service-account-signing-key-file="+p.path("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range="+ServiceCIDR,
		"--authorization-mode=Node,RBAC",
		// podnet's DaemonSet is privileged.
		"--allow-privileged=true",
		"--profiling=false",
		"--cert-dir="+filepath.Join(c.Dir, "apiserver-certs"),
		"-v=1",
	)
	if err != nil {
		return err
	}
	return c.waitFor("kube-apiserver", 2*time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%v %s", err, body)
		}
		return nil
	})
}

func (c *Cluster) startControllers() error {
	p := c.pki
	if err := c.start("kube-controller-manager", c.controlPlane(), nil, filepath.Join(c.kubeBin, "kube-controller-manager"),
		"--kubeconfig="+c.kubeconfig(),
		"--bind-address=127.0.0.1", "--leader-elect=false",
		"--service-account-private-key-file="+p.path("sa.key"),
		"--root-ca-file="+p.path("ca.crt"),
		"--use-service-account-credentials=false",
		// Every Node gets spec.podCIDRs, which podnet's node-CIDR model
		// hands its pods' addresses out of; the etcd model ignores them.
		"--allocate-node-cidrs=true", "--cluster-cidr="+ClusterCIDR, "--node-cidr-mask-size=24",
		"--cert-dir="+filepath.Join(c.Dir, "kcm-certs"),
		"-v=1",
	); err != nil {
		return err
	}
	if err := c.start("kube-scheduler", c.controlPlane(), nil, filepath.Join(c.kubeBin, "kube-scheduler"),
		"--kubeconfig="+c.kubeconfig(),
		"--bind-address=127.0.0.1", "--leader-elect=false",
		"-v=1",
	); err != nil {
		return err
	}
	// The ServiceAccount admission plugin refuses pods until the
	// controller-manager has made the namespace's default account.
	return c.waitFor("kube-controller-manager", 2*time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}
