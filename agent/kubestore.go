package agent

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/ipam/store/kube"
)

// OpenKubeStore opens block IPAM's store on the Kubernetes API with the
// agent's own credentials (its in-cluster service account, or the
// --kubeconfig it was given): for seeding pools and for GC. The plugins
// use a kubeconfig of their own (CNICredentials).
func OpenKubeStore(cfg *rest.Config, prefix string) (*kube.Store, error) {
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
	return kube.Open(kube.Options{Kubeconfig: "(the agent's API config)", KubeconfigJSON: kc, Prefix: prefix, Dial: cfg.Dial})
}
