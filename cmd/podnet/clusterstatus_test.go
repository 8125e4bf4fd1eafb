package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAgentOf: the agent container's state in words, its error from the
// termination message, a signal's kill without the log's last line.
func TestAgentOf(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "podnet-x"}, Spec: corev1.PodSpec{NodeName: "n2"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "agent", RestartCount: 2,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1,
					Message: "time=... level=INFO msg=start\npodnet: open /var/lib/podnet/ipam.db: invalid database\n"}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 137, Message: "level=INFO msg=x"}}}}}}
	a := agentOf(p)
	if a.Pod != "podnet-x" || a.Node != "n2" || a.Ready || a.Restarts != 2 ||
		a.Container != "terminated: Error, exit code 1: podnet: open /var/lib/podnet/ipam.db: invalid database" ||
		a.LastTermination != "Error, exit code 137 (killed by signal 9)" {
		t.Errorf("%+v", a)
	}
	p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 10s restarting failed container"}}
	if a := agentOf(p); a.Container != "waiting: CrashLoopBackOff back-off 10s restarting failed container" {
		t.Errorf("%q", a.Container)
	}
}

func TestNodeOf(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{PodCIDR: "10.244.0.0/24"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", Message: "network not ready"}}}}
	got := nodeOf(n)
	if got.Ready || got.NotReadyReason != "KubeletNotReady network not ready" || len(got.PodCIDRs) != 1 {
		t.Errorf("%+v", got)
	}
}
