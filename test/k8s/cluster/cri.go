package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// removeSandboxes stops and removes every pod sandbox the harness's
// containerd still has, through CRI as kubelet would: stopping a sandbox
// runs the CNI DEL and removes its network namespace, so nothing of it
// stays on the machine. Kubelet removes sandboxes lazily (garbage
// collection), so some are always left when it stops.
func removeSandboxes(sock string) error {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	list, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("CRI ListPodSandbox on %s: %w", sock, err)
	}
	var errs []error
	for _, sb := range list.Items {
		name := sb.GetMetadata().GetNamespace() + "/" + sb.GetMetadata().GetName()
		if _, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("CRI StopPodSandbox %s (%s): %w", sb.Id, name, err))
			continue
		}
		if _, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("CRI RemovePodSandbox %s (%s): %w", sb.Id, name, err))
		}
	}
	return errors.Join(errs...)
}

// runtimeStatus returns containerd's CRI conditions (RuntimeReady,
// NetworkReady) as reported to kubelet.
func runtimeStatus(sock string) ([]*runtimeapi.RuntimeCondition, error) {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := runtimeapi.NewRuntimeServiceClient(conn).Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return nil, err
	}
	return st.GetStatus().GetConditions(), nil
}
