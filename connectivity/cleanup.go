package connectivity

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DeleteNamespace deletes a run's namespace and waits until it is gone.
// It uses its own deadline, not the run's: an interrupted run must still
// clean up.
func DeleteNamespace(cs kubernetes.Interface, ns string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	bg := metav1.DeletePropagationBackground
	err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete namespace %s: %w", ns, err)
	}
	for {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s still there after %s (the API server removes it once its pods are gone)", ns, timeout)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Leftovers lists the namespaces of earlier runs (label LabelRun).
func Leftovers(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	list, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: LabelRun})
	if err != nil {
		return nil, fmt.Errorf("list namespaces labelled %s: %w", LabelRun, err)
	}
	var out []string
	for _, n := range list.Items {
		out = append(out, n.Name)
	}
	return out, nil
}
