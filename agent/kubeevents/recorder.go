package kubeevents

import (
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
)

// Component is the Events' source component (reportingController).
const Component = "podnet-agent"

// The reasons of the agent's Events.
const (
	// ReasonClosedAgentUnreachable (Warning, on the Pod): a plugin
	// closed the pod because the policy handshake with the agent failed;
	// the agent has since admitted and opened it.
	ReasonClosedAgentUnreachable = "NetworkClosedAgentUnreachable"
	// ReasonPolicyApplyFailed (Warning, on the Node): the node's policy
	// could not be applied; the agent retries.
	ReasonPolicyApplyFailed = "PolicyApplyFailed"
	// ReasonPolicyApplied (Normal, on the Node): the first apply that
	// succeeded after a failure.
	ReasonPolicyApplied = "PolicyApplied"
	// ReasonInvalidIPPool (Warning, on the IPPool): the pool hands out no
	// address until it is mended.
	ReasonInvalidIPPool = "InvalidIPPool"
)

// Recorder records the Events of one node's agent. Its methods do
// nothing on a nil Recorder.
type Recorder struct {
	node string
	b    record.EventBroadcaster
	rec  record.EventRecorder
}

// New makes the Recorder of node's agent for the API server of rc, its
// requests wrapped by wrap when not nil (the agent's request counter).
func New(rc *rest.Config, node string, wrap func(http.RoundTripper) http.RoundTripper) (*Recorder, error) {
	c := rest.CopyConfig(rc)
	if c.UserAgent == "" {
		c.UserAgent = Component
	}
	if wrap != nil {
		c.Wrap(wrap)
	}
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("events: Kubernetes client: %w", err)
	}
	return NewForSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")}, node), nil
}

// NewForSink makes a Recorder that writes to sink (a fake clientset's in
// tests).
func NewForSink(sink record.EventSink, node string) *Recorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(sink)
	return &Recorder{node: node, b: b,
		rec: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component, Host: node})}
}

// Shutdown stops recording; Events not yet written may be lost.
func (r *Recorder) Shutdown() {
	if r != nil {
		r.b.Shutdown()
	}
}

// Event records an Event on the object ref names.
func (r *Recorder) Event(ref *corev1.ObjectReference, eventType, reason, message string) {
	if r == nil || ref == nil {
		return
	}
	r.rec.Event(ref, eventType, reason, message)
}

// Node is the reference of the recorder's own Node (nil on a nil
// Recorder).
func (r *Recorder) Node() *corev1.ObjectReference {
	if r == nil {
		return nil
	}
	return NodeRef(r.node)
}

// NodeRef is a Node's reference; a Node's UID in its Events is its name,
// as the kubelet's are.
func NodeRef(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name, UID: types.UID(name)}
}

// PodRef is a Pod's reference; uid may be empty.
func PodRef(namespace, name string, uid types.UID) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: namespace, Name: name, UID: uid}
}

// IPPoolRef is a podnet.io/v1 IPPool's reference (the object's name is
// the pool's).
func IPPoolRef(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "podnet.io/v1", Kind: "IPPool", Name: name}
}
