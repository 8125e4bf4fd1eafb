package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/podnet/podnet/agent/netpol/admitsock"
	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/dataplane/tag"
)

// admitTimeout bounds ADD's wait for the policy agent's answer (within
// the caller's deadline, if sooner). An agent that is down answers at
// once (nothing listens); this is for one that is up and slow: a pod the
// watch has not brought yet, an apply that fails.
const admitTimeout = 2 * time.Second

// admission is the policy handshake of one ADD, asked in the background
// while the host side is made.
type admission struct {
	pod    admitsock.Pod
	cancel context.CancelFunc
	done   chan admitOutcome
	start  time.Time
}

type admitOutcome struct {
	selected bool
	err      error
	took     time.Duration
}

// podIdentity is the pod's namespace and name from CNI_ARGS; ok is false
// for a sandbox that is no Kubernetes pod (podnet run, cnitool), which
// no NetworkPolicy can select.
func podIdentity(pairs [][2]string) (namespace, name string, ok bool) {
	for _, kv := range pairs {
		switch kv[0] {
		case "K8S_POD_NAMESPACE":
			namespace = kv[1]
		case "K8S_POD_NAME":
			name = kv[1]
		}
	}
	return namespace, name, namespace != "" && name != ""
}

// startAdmission asks the node's policy agent about the pod, with the
// IPAM's addresses, in the background; nil when the network has no
// policySocket or the sandbox is no Kubernetes pod.
func (a *attachment) startAdmission(ctx context.Context, ipamRes *cni.Result) *admission {
	if a.conf.PolicySocket == "" {
		return nil
	}
	ns, name, ok := podIdentity(a.args.ArgsPairs)
	if !ok {
		return nil
	}
	p := admitsock.Pod{Namespace: ns, Name: name, ContainerID: a.args.ContainerID, IfName: a.args.IfName, HostIf: a.hostName}
	for _, ip := range ipamRes.IPs {
		p.Addrs = append(p.Addrs, ip.Address.Addr().Unmap())
	}
	ctx, cancel := context.WithTimeout(ctx, admitTimeout)
	adm := &admission{pod: p, cancel: cancel, done: make(chan admitOutcome, 1), start: time.Now()}
	go func() {
		sel, err := admitsock.Ask(ctx, a.conf.PolicySocket, p)
		adm.done <- admitOutcome{selected: sel, err: err, took: time.Since(adm.start)}
	}()
	return adm
}

// abandon stops the handshake of an ADD that failed before it was
// needed.
func (adm *admission) abandon() {
	if adm != nil {
		adm.cancel()
		<-adm.done
	}
}

// admit waits for the handshake, once the host side and the source
// guard are in place and before the pod's end comes up (addPod): until
// then no packet reaches or leaves the pod (its interface is down, the
// host end has no carrier), so whatever the outcome, the pod's first
// packet meets it. With an answer the pod goes on: its rules are in
// place when a policy selects it, and there are none to wait for when
// none does. Without one (no agent listening, no answer within
// admitTimeout, a refusal) the pod is closed in the kernel
// (dataplane.Closed) until the agent, back, admits it: as Calico's
// default, the pod starts, closed. Only a pod that cannot be closed
// fails the ADD.
func (a *attachment) admit(ctx context.Context, adm *admission, ips []podIP, u *undo) error {
	if adm == nil {
		return nil
	}
	out := <-adm.done
	adm.cancel()
	if timing {
		what := "not selected"
		switch {
		case out.err != nil:
			what = "no answer"
		case out.selected:
			what = "selected"
		}
		fmt.Fprintf(a.args.Stderr, "podnet ADD: policy handshake %.3f ms (%s)\n", float64(out.took)/1e6, what)
	}
	if out.err == nil {
		return nil
	}
	p := dataplane.ClosedPod{Pod: dataplane.ClosedPodRef(a.owner, adm.pod.Namespace, adm.pod.Name), Owner: a.owner, Addrs: addrsOf(ips)}
	u.push("closed pod", a.removeClosed)
	c, err := dataplane.NewClosed(admitsock.ClosedLockPath(a.conf.PolicySocket), 0)
	if err == nil {
		defer c.Close()
		err = c.Add(context.WithoutCancel(ctx), p)
	}
	if err != nil {
		return cni.Errorf(cni.CodeTryAgainLater, "%v; and the pod could not be closed until the agent admits it: %v", out.err, err)
	}
	fmt.Fprintf(a.args.Stderr, "podnet: %v; pod %s closed until the agent admits it\n", out.err, adm.pod)
	return nil
}

// timing is PODNET_PLUGIN_TIMING (skel's): report the handshake's wait.
var timing = os.Getenv("PODNET_PLUGIN_TIMING") != ""

// removeClosed removes the attachment's closed addresses, if any: the
// undo of a failed ADD, and DEL's way when its batch failed.
func (a *attachment) removeClosed() error {
	c, err := dataplane.NewClosed("", 0)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.RemoveOwned(a.owner)
}

// gcClosed removes the closed addresses of this network's attachments
// that are not valid. An element without a readable owner is not
// podnet's, and stays.
func gcClosed(network string, valid map[tag.Owner]bool) error {
	c, err := dataplane.NewClosed("", 0)
	if err != nil {
		return err
	}
	defer c.Close()
	pods, err := c.List()
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range pods {
		if p.Owner.Network == network && !valid[p.Owner] {
			errs = append(errs, c.RemoveOwned(p.Owner))
		}
	}
	return errors.Join(errs...)
}
