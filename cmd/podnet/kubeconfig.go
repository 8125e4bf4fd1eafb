package main

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeRESTConfig is how every command finds the API server: the
// kubeconfig at path (a --kubeconfig flag) when there is one. Without
// it, the agent (asUser false) takes the pod's in-cluster config (the
// service account's token and CA, and the API server at
// $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT); a command a person
// runs (asUser true) reads what kubectl reads ($KUBECONFIG, else
// ~/.kube/config, its current context), then the in-cluster config.
func kubeRESTConfig(path string, asUser bool) (*rest.Config, error) {
	if path != "" {
		c, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		return c, nil
	}
	if asUser {
		c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("read the Kubernetes config ($KUBECONFIG, ~/.kube/config or in-cluster; or set --kubeconfig): %w", err)
		}
		return c, nil
	}
	c, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster Kubernetes config (or set --kubeconfig): %w", err)
	}
	return c, nil
}
