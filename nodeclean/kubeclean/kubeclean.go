package kubeclean

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/kube"
	"github.com/podnet/podnet/ipam/store/kube/kubehttp"
)

// AnnotationPrefix starts every annotation podnet writes on a Node
// (kubeapi.AnnotationPrefix; not imported, so that the CLI's uninstall
// links no informer).
const AnnotationPrefix = "podnet.io/"

// Config says which node to clean and how to reach the API.
type Config struct {
	REST *rest.Config
	Node string
	// Blocks removes the node's block IPAM on the API too. On a cluster
	// without it (no IPAMNode CRD, or no IPAMNode of the node) there is
	// nothing to do.
	Blocks bool
	// Prefix is the IPAM's key prefix (default ipam.DefaultPrefix).
	Prefix string
}

// PodnetAnnotations are the keys of ann that are podnet's, sorted.
func PodnetAnnotations(ann map[string]string) []string {
	var out []string
	for k := range ann {
		if strings.HasPrefix(k, AnnotationPrefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// RemovalPatch is the JSON merge patch that removes keys from a Node's
// annotations and changes nothing else.
func RemovalPatch(keys []string) []byte {
	ann := map[string]any{}
	for _, k := range keys {
		ann[k] = nil
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	return b
}

// Left names what of the node podnet still has in the API: its
// annotations, and with Blocks its IPAMNode. A Node that does not exist
// has no annotations.
func Left(ctx context.Context, c Config) ([]string, error) {
	keys, err := annotations(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("annotation %s of Node %s", k, c.Node))
	}
	if c.Blocks {
		has, err := hasIPAMNode(ctx, c)
		if err != nil {
			return nil, err
		}
		if has {
			out = append(out, fmt.Sprintf("IPAMNode %s (block IPAM)", c.Node))
		}
	}
	return out, nil
}

// Remove removes the Node's podnet.io/ annotations, then with Blocks its
// IPAM; it returns what it removed. Running it again removes nothing.
func Remove(ctx context.Context, c Config) ([]string, error) {
	keys, err := annotations(ctx, c)
	if err != nil {
		return nil, err
	}
	var done []string
	if len(keys) > 0 {
		cs, err := kubernetes.NewForConfig(c.REST)
		if err != nil {
			return nil, err
		}
		_, err = cs.CoreV1().Nodes().Patch(ctx, c.Node, types.MergePatchType, RemovalPatch(keys), metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("remove the podnet.io/ annotations of Node %s: %w", c.Node, err)
		}
		for _, k := range keys {
			done = append(done, fmt.Sprintf("annotation %s of Node %s", k, c.Node))
		}
	}
	if !c.Blocks {
		return done, nil
	}
	had, err := hasIPAMNode(ctx, c)
	if err != nil || !had {
		return done, err
	}
	st, err := c.store()
	if err != nil {
		return done, err
	}
	defer st.Close()
	// Its addresses too: podnet leaves the node, and an address kept
	// for a pod it no longer serves would keep the IPAMNode (a borrowed
	// entry) for ever.
	opts := ipam.RemoveNodeOptions{ReleaseAddresses: true}
	if err := ipam.New(st, ipam.Config{Keys: c.keys()}).RemoveNode(ctx, c.Node, opts); err != nil {
		return done, fmt.Errorf("remove the block IPAM of node %s: %w", c.Node, err)
	}
	return append(done, fmt.Sprintf("IPAMNode %s (its addresses released, its blocks let go, as podnet ipam node rm --release-addresses)", c.Node)), nil
}

func (c Config) keys() ipam.Keys {
	if c.Prefix == "" {
		return ipam.Keys{Prefix: ipam.DefaultPrefix}
	}
	return ipam.Keys{Prefix: c.Prefix}
}

func (c Config) store() (*kube.Store, error) {
	return kubehttp.Open(c.REST, nil, kube.Options{Kubeconfig: "the Kubernetes config", Prefix: c.keys().Prefix})
}

// annotations reads the Node's podnet.io/ annotations.
func annotations(ctx context.Context, c Config) ([]string, error) {
	cs, err := kubernetes.NewForConfig(c.REST)
	if err != nil {
		return nil, err
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, c.Node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get Node %s: %w", c.Node, err)
	}
	return PodnetAnnotations(n.Annotations), nil
}

// hasIPAMNode reports whether the node has an IPAMNode; a cluster
// without the CRD has none.
func hasIPAMNode(ctx context.Context, c Config) (bool, error) {
	st, err := c.store()
	if err != nil {
		return false, err
	}
	defer st.Close()
	_, err = st.Get(ctx, c.keys().Node(c.Node))
	switch {
	case errors.Is(err, ipam.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("get the IPAMNode of %s: %w", c.Node, err)
	}
	return true, nil
}
