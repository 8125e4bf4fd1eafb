package netpol

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/podnet/podnet/agent/kubeevents"
	"github.com/podnet/podnet/policy"
)

// applyFailed records a PolicyApplyFailed Event on the Node when the
// failure is news (the first of a run, or another error than the last):
// the loop retries with backoff, and each retry must not be an Event.
func (s *Service) applyFailed(err error) {
	if s.cfg.Events == nil || !s.applyState.Fail(err.Error()) {
		return
	}
	s.cfg.Events.Event(s.cfg.Events.Node(), corev1.EventTypeWarning, kubeevents.ReasonPolicyApplyFailed,
		fmt.Sprintf("network policy not applied on node %s (retried with backoff; the node's pods keep their last rules): %v", s.cfg.Node, err))
}

// applySucceeded records PolicyApplied on the Node after a failure only.
func (s *Service) applySucceeded() {
	if s.cfg.Events == nil || !s.applyState.Recover() {
		return
	}
	s.cfg.Events.Event(s.cfg.Events.Node(), corev1.EventTypeNormal, kubeevents.ReasonPolicyApplied,
		fmt.Sprintf("network policy applied on node %s again after a failure", s.cfg.Node))
}

// closedOpened records on the Pod that a plugin had closed it because
// the agent did not answer its handshake, and that it is open now. The
// closed element has no time: since is when the agent first found it.
func (s *Service) closedOpened(key policy.PodKey, since time.Time) {
	if s.cfg.Events == nil {
		return
	}
	s.cfg.Events.Event(kubeevents.PodRef(key.Namespace, key.Name, s.podUID(key)), corev1.EventTypeWarning, kubeevents.ReasonClosedAgentUnreachable,
		closedOpenedMessage(s.cfg.Node, since, time.Now()))
}

func closedOpenedMessage(node string, since, now time.Time) string {
	return fmt.Sprintf("pod network closed by the CNI plugin: the podnet agent on node %s did not answer the policy handshake; "+
		"closed since at least %s, admitted by the agent and open now, after %s",
		node, since.UTC().Format(time.RFC3339), now.Sub(since).Round(time.Second))
}
