package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/install"
)

// Files the agent keeps in the CNI config directory for plugins that talk
// to the Kubernetes API (block IPAM on the API). The runtime ignores both:
// it loads only .conf, .conflist and .json files.
const (
	CNIKubeconfigName = "podnet-kubeconfig"
	CNITokenName      = "podnet-token"
)

// CNICredentials keeps a kubeconfig for the plugins: the API server, its
// CA, and a token of a service account of their own (not the agent's,
// whose rights are wider), obtained from the TokenRequest API and renewed
// at two thirds of its life. The token lives in a file of its own that
// the kubeconfig names (tokenFile, relative: beside the kubeconfig), so a
// renewal rewrites one small file.
type CNICredentials struct {
	// REST reaches the API server for the TokenRequest, as the agent.
	REST *rest.Config
	// Server and CAData are what the plugins dial: default the REST
	// config's host and CA.
	Server string
	CAData []byte
	// Namespace and ServiceAccount name the plugins' account.
	Namespace, ServiceAccount string
	// Dir receives the kubeconfig and the token (the CNI config dir).
	Dir string
	// TTL asked of the token (default 1h; the API may shorten it).
	TTL time.Duration
	Log *slog.Logger
}

// kubeconfig is the JSON form of a kubeconfig (JSON is YAML, so kubectl
// reads it too).
type kubeconfig struct {
	APIVersion     string          `json:"apiVersion"`
	Kind           string          `json:"kind"`
	Clusters       []namedCluster  `json:"clusters"`
	Users          []namedUser     `json:"users"`
	Contexts       []namedContext  `json:"contexts"`
	CurrentContext string          `json:"current-context"`
	Preferences    struct{}        `json:"preferences"`
	Extensions     json.RawMessage `json:"extensions,omitempty"`
}

type namedCluster struct {
	Name    string `json:"name"`
	Cluster struct {
		Server        string `json:"server"`
		CAData        string `json:"certificate-authority-data,omitempty"`
		TLSServerName string `json:"tls-server-name,omitempty"`
	} `json:"cluster"`
}

type namedUser struct {
	Name string   `json:"name"`
	User userAuth `json:"user"`
}

// userAuth is how a kubeconfig's user authenticates.
type userAuth struct {
	Token          string `json:"token,omitempty"`
	TokenFile      string `json:"tokenFile,omitempty"`
	ClientCertData []byte `json:"client-certificate-data,omitempty"`
	ClientKeyData  []byte `json:"client-key-data,omitempty"`
}

type namedContext struct {
	Name    string `json:"name"`
	Context struct {
		Cluster string `json:"cluster"`
		User    string `json:"user"`
	} `json:"context"`
}

// renderKubeconfig is a kubeconfig of one cluster and one user.
func renderKubeconfig(server, serverName string, caData []byte, user userAuth) ([]byte, error) {
	kc := kubeconfig{APIVersion: "v1", Kind: "Config", CurrentContext: "podnet"}
	var c namedCluster
	c.Name = "podnet"
	c.Cluster.Server, c.Cluster.TLSServerName = server, serverName
	if len(caData) > 0 {
		c.Cluster.CAData = base64.StdEncoding.EncodeToString(caData)
	}
	var u namedUser
	u.Name = "podnet"
	u.User = user
	var x namedContext
	x.Name = "podnet"
	x.Context.Cluster, x.Context.User = "podnet", "podnet"
	kc.Clusters, kc.Users, kc.Contexts = []namedCluster{c}, []namedUser{u}, []namedContext{x}
	return json.MarshalIndent(kc, "", "  ")
}

// Run writes the credentials, then renews the token until ctx ends.
func (c *CNICredentials) Run(ctx context.Context) {
	c.renew(ctx, time.Time{})
}

// renew renews the token at two thirds of its life (expiry, that of the
// token written last; zero: now) until ctx ends, retrying a failure with
// backoff: the previous token stays valid until its expiry meanwhile.
func (c *CNICredentials) renew(ctx context.Context, expiry time.Time) {
	backoff := time.Second
	wait := time.Until(expiry) * 2 / 3
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(wait, 0)):
		}
		next, err := c.WriteOnce(ctx)
		if err != nil {
			c.Log.Warn("plugin credentials", "dir", c.Dir, "err", err, "retry_in", backoff)
			wait, backoff = backoff, min(2*backoff, time.Minute)
			continue
		}
		wait, backoff = time.Until(next)*2/3, time.Second
	}
}

// WriteOnce requests a token and writes the token file and the
// kubeconfig (each by rename, token first), returning the token's expiry.
func (c *CNICredentials) WriteOnce(ctx context.Context) (time.Time, error) {
	if c.REST == nil || c.Namespace == "" || c.ServiceAccount == "" || c.Dir == "" {
		return time.Time{}, errors.New("plugin credentials: REST config, namespace, service account and directory are required")
	}
	token, expiry, err := c.requestToken(ctx)
	if err != nil {
		return time.Time{}, err
	}
	tokenPath := filepath.Join(c.Dir, CNITokenName)
	if err := install.WriteFile(tokenPath, []byte(token), 0o600); err != nil {
		return time.Time{}, err
	}
	server, ca := c.Server, c.CAData
	if server == "" {
		server = c.REST.Host
	}
	if len(ca) == 0 {
		if ca, err = restCA(c.REST); err != nil {
			return time.Time{}, fmt.Errorf("plugin credentials: %w", err)
		}
	}
	serverName := ""
	if c.Server == "" {
		serverName = c.REST.TLSClientConfig.ServerName
	}
	// The token file is named relative to the kubeconfig (which
	// kubectl and ipam/store/kube resolve from the kubeconfig's own
	// directory): the agent writes Dir where it mounts the host's CNI
	// config directory (/host/etc/cni/net.d in the DaemonSet), and the
	// plugins read it on the host as /etc/cni/net.d, so no absolute path
	// is right for both.
	kc, err := renderKubeconfig(server, serverName, ca, userAuth{TokenFile: CNITokenName})
	if err != nil {
		return time.Time{}, err
	}
	return expiry, install.WriteFile(filepath.Join(c.Dir, CNIKubeconfigName), kc, 0o600)
}

// restCA is cfg's CA bundle.
func restCA(cfg *rest.Config) ([]byte, error) {
	if ca := cfg.TLSClientConfig.CAData; len(ca) > 0 || cfg.TLSClientConfig.CAFile == "" {
		return ca, nil
	}
	ca, err := os.ReadFile(cfg.TLSClientConfig.CAFile)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	return ca, nil
}

// requestToken asks the TokenRequest API for a token of the plugins'
// service account.
func (c *CNICredentials) requestToken(ctx context.Context) (string, time.Time, error) {
	ttl := c.TTL
	if ttl <= 0 {
		ttl = time.Hour
	}
	secs := int64(ttl / time.Second)
	body, err := json.Marshal(authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &secs}})
	if err != nil {
		return "", time.Time{}, err
	}
	cfg := rest.CopyConfig(c.REST)
	cfg.APIPath = "/api"
	client, err := rest.UnversionedRESTClientFor(withJSON(cfg))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("plugin credentials: client: %w", err)
	}
	raw, err := client.Post().AbsPath("/api/v1/namespaces", c.Namespace, "serviceaccounts", c.ServiceAccount, "token").
		SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Raw()
	if err != nil {
		return "", time.Time{}, fmt.Errorf("plugin credentials: token of service account %s/%s: %w", c.Namespace, c.ServiceAccount, err)
	}
	var tr authv1.TokenRequest
	if err := json.Unmarshal(raw, &tr); err != nil || tr.Status.Token == "" {
		return "", time.Time{}, fmt.Errorf("plugin credentials: token of service account %s/%s: no token in the answer (%v)", c.Namespace, c.ServiceAccount, err)
	}
	return tr.Status.Token, tr.Status.ExpirationTimestamp.Time, nil
}

// withJSON gives cfg the serializer an unversioned client needs to send
// raw JSON and read raw bytes.
func withJSON(cfg *rest.Config) *rest.Config {
	cfg.GroupVersion = nil
	cfg.AcceptContentTypes = "application/json"
	cfg.ContentType = "application/json"
	if cfg.NegotiatedSerializer == nil {
		cfg.NegotiatedSerializer = serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion()
	}
	return cfg
}
