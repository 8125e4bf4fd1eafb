package kubeblocks

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/ipam/store/kube"
)

// OpenStore opens block IPAM's store on the Kubernetes API with the
// agent's own credentials (its in-cluster service account, or the
// --kubeconfig it was given): behind the socket the node's plugins use,
// and through Service.Store the agent's own (pools, GC, removal).
//
// Its requests are not yet counted in podnet_agent_api_requests_total:
// ipam/store/kube makes its own HTTP transport. The seam is the
// kube.Open call below (see storeTransportSeam).
func OpenStore(cfg *rest.Config, prefix string) (*kube.Store, error) {
	ca, err := restCA(cfg)
	if err != nil {
		return nil, err
	}
	user := userAuth{Token: cfg.BearerToken, TokenFile: cfg.BearerTokenFile,
		ClientCertData: cfg.TLSClientConfig.CertData, ClientKeyData: cfg.TLSClientConfig.KeyData}
	if len(user.ClientCertData) == 0 && cfg.TLSClientConfig.CertFile != "" {
		if user.ClientCertData, err = os.ReadFile(cfg.TLSClientConfig.CertFile); err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		if user.ClientKeyData, err = os.ReadFile(cfg.TLSClientConfig.KeyFile); err != nil {
			return nil, fmt.Errorf("client key: %w", err)
		}
	}
	if user.Token == "" && user.TokenFile == "" && len(user.ClientCertData) == 0 {
		return nil, errors.New("kubernetes store: the agent's API config has no token and no client certificate")
	}
	kc, err := renderKubeconfig(cfg.Host, cfg.TLSClientConfig.ServerName, ca, user)
	if err != nil {
		return nil, err
	}
	// storeTransportSeam: once ipam/store/kube accepts an
	// http.RoundTripper, pass it one wrapped by the agent's request
	// counter (kubeapi.Source.CountRequests) here, so that the socket's
	// API requests are counted with every other request of the agent.
	//
	// The socket sends the requests of every plugin of the node, several
	// at a time: more idle connections than a plugin's few (as many as
	// minihttp kept for everyone before).
	return kube.Open(kube.Options{Kubeconfig: "(the agent's API config)", KubeconfigJSON: kc, Prefix: prefix, Dial: cfg.Dial,
		MaxIdleConns: 4})
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
