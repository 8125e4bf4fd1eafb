package cluster

import (
	"context"
	"encoding/json"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerPID returns the host PID of the running container called
// container of pod namespace/pod on this node, from its runtime's
// verbose status: the process a crash test kills.
func (n *Node) ContainerPID(ctx context.Context, namespace, pod, container string) (int, error) {
	conn, rs, err := n.criConn()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	list, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{
			"io.kubernetes.pod.namespace": namespace, "io.kubernetes.pod.name": pod, "io.kubernetes.container.name": container,
		},
	}})
	if err != nil {
		return 0, fmt.Errorf("CRI ListContainers: %w", err)
	}
	if len(list.Containers) != 1 {
		return 0, fmt.Errorf("%d running containers %s in pod %s/%s on %s, want 1", len(list.Containers), container, namespace, pod, n.Name)
	}
	id := list.Containers[0].Id
	st, err := rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return 0, fmt.Errorf("CRI ContainerStatus %s: %w", id, err)
	}
	var info struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil || info.PID <= 0 {
		return 0, fmt.Errorf("container %s of %s/%s on %s: no pid in its status (%v)", id, namespace, pod, n.Name, err)
	}
	return info.PID, nil
}
