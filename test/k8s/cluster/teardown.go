package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// stop tears the cluster down: pods first, through the API, so that
// kubelet runs every CNI DEL; then what is left through CRI; then the
// processes in reverse order of start; then the machine's state. A
// cluster PODNET_K8S_KEEP keeps is left running instead (keep.go).
func (c *Cluster) stop() {
	if c.t.Failed() {
		c.t.Logf("cluster logs:\n%s", c.LogTails(40))
	}
	if c.keeping() {
		if err := c.hold(); err != nil {
			c.t.Errorf("cluster: keeping it: %v", err)
		}
		return
	}
	start := time.Now()
	errs := c.drainNodes()
	drained := time.Now()
	errs = append(errs, c.stopProcesses()...)
	stopped := time.Now()
	// The nodes' mount namespaces go with Dir, before their mount points
	// on the machine are removed.
	errs = append(errs, c.removeDir())
	errs = append(errs, c.restoreHost()...)
	errs = append(errs, c.reaper.done())
	c.t.Logf("cluster: torn down in %s (pods drained %s, processes stopped %s)", time.Since(start).Round(time.Millisecond),
		drained.Sub(start).Round(time.Millisecond), stopped.Sub(drained).Round(time.Millisecond))
	if err := errors.Join(errs...); err != nil {
		c.t.Errorf("cluster teardown: %v", err)
	}
}

// drainNodes removes the pods while the kubelets still run, so that each
// kubelet tears its pods down with their CNI DEL as on a real node; then
// it stops the kubelets and removes through CRI the sandboxes they had
// not yet garbage-collected.
func (c *Cluster) drainNodes() []error {
	var errs []error
	if c.anyRunning("kubelet") {
		if err := c.deleteAllPods(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range c.Nodes {
		if p := c.byName[n.procName("kubelet")]; p != nil {
			errs = append(errs, p.stop(30*time.Second))
		}
	}
	for _, n := range c.Nodes {
		if p := c.byName[n.procName("containerd")]; p != nil && !p.exited() {
			errs = append(errs, removeSandboxes(n.containerdSock))
		}
	}
	return errs
}

// anyRunning says whether some node's component is running.
func (c *Cluster) anyRunning(component string) bool {
	for _, n := range c.Nodes {
		if p := c.byName[n.procName(component)]; p != nil && !p.exited() {
			return true
		}
	}
	return false
}

// stopProcesses stops every component but the kubelets (drainNodes
// stopped them), last started first: each one stops before what it
// depends on. A node's shims go with its containerd.
func (c *Cluster) stopProcesses() []error {
	kubelets, containerds := map[string]bool{}, map[string]*Node{}
	for _, n := range c.Nodes {
		kubelets[n.procName("kubelet")] = true
		containerds[n.procName("containerd")] = n
	}
	var errs []error
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		if kubelets[p.name] {
			continue
		}
		errs = append(errs, p.stop(20*time.Second))
		if n := containerds[p.name]; n != nil {
			errs = append(errs, killShims(n.containerdSock)...)
		}
	}
	return errs
}

// killShims kills the shims still serving the containerd at address once
// it has stopped. removeSandboxes should have ended every container, and
// with it its shim, so each one left is reported as an error. A shim
// exits on its own a moment after its last container is deleted, which
// a loaded machine can stretch past containerd's stop: each gets
// shimGrace to go first.
func killShims(address string) []error {
	deadline := time.Now().Add(shimGrace)
	for len(shimPIDs(address)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	var errs []error
	for _, pid := range shimPIDs(address) {
		errs = append(errs, fmt.Errorf("containerd shim %d outlived its containers; killed", pid))
		if pr, err := os.FindProcess(pid); err == nil {
			_ = pr.Kill()
		}
	}
	return errs
}

// shimGrace is how long killShims waits for shims to exit by themselves.
const shimGrace = 15 * time.Second

// restoreHost undoes what the cluster changed on the machine outside the
// nodes' namespaces: kubelet's sysctls, the nodes' cgroup roots, and the
// mount points made for the nodes' own directories.
func (c *Cluster) restoreHost() []error {
	var errs []error
	if c.sysctls != nil {
		errs = append(errs, restoreSysctls(c.sysctls))
	}
	for _, n := range c.Nodes {
		if n.cgroupRoot != "" {
			errs = append(errs, removeCgroupRoot(n.cgroupRoot))
		}
	}
	// Deepest first; a directory something else has put files in stays,
	// and so does every one while another cluster runs (lockHostDirs).
	if soleCluster(c.hostDirsLock) {
		for i := len(c.newHostDirs) - 1; i >= 0; i-- {
			_ = removeEmptyTree(c.newHostDirs[i])
		}
	}
	if c.hostDirsLock != nil {
		c.hostDirsLock.Close()
	}
	return errs
}

// removeDir removes Dir once nothing is mounted below it: removing a tree
// with a mount in it would delete the mounted files too.
func (c *Cluster) removeDir() error {
	if err := unmountUnder(c.Dir); err != nil {
		return err
	}
	if left, _ := mountsUnder(c.Dir); len(left) > 0 {
		return fmt.Errorf("mounts left under %s, not removing it: %v", c.Dir, left)
	}
	return os.RemoveAll(c.Dir)
}

// deleteAllPods deletes the DaemonSets, Deployments and ReplicaSets (so
// that nothing recreates pods) and every pod, and waits until they are
// gone from the API, that is until kubelet has torn each one down.
func (c *Cluster) deleteAllPods() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dss, err := c.Client.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, ds := range dss.Items {
		if err := c.Client.AppsV1().DaemonSets(ds.Namespace).Delete(ctx, ds.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	if err := c.deleteReplicated(ctx); err != nil {
		return err
	}
	// Application pods before podnet's agent: their CNI DEL does not
	// need the agent, but this is the order a node drains in.
	for _, sel := range []string{"app.kubernetes.io/name!=podnet", "app.kubernetes.io/name=podnet"} {
		start := time.Now()
		if err := c.deletePods(ctx, sel); err != nil {
			return err
		}
		if err := c.waitPodsGone(ctx, sel); err != nil {
			return err
		}
		if d := time.Since(start); d > 10*time.Second {
			c.t.Logf("cluster: pods %s took %s to go", sel, d.Round(time.Millisecond))
		}
	}
	return nil
}

// deleteReplicated deletes the Deployments (the DNS add-on's) and then
// every ReplicaSet, which the garbage collector would delete after them,
// so that no controller recreates a pod deletePods deletes.
func (c *Cluster) deleteReplicated(ctx context.Context) error {
	apps := c.Client.AppsV1()
	deps, err := apps.Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, d := range deps.Items {
		if err := apps.Deployments(d.Namespace).Delete(ctx, d.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	rss, err := apps.ReplicaSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, rs := range rss.Items {
		if err := apps.ReplicaSets(rs.Namespace).Delete(ctx, rs.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// drainGrace bounds the grace period of the pods a teardown deletes, as
// `kubectl drain --grace-period` does: some upstream specs leave pods
// behind with 600 s of it (a terminating endpoint that must keep
// serving), which would outlast deleteAllPods's two minutes. The kubelet
// still stops each pod and runs its CNI DEL.
const drainGrace int64 = 10

// deletePods deletes the pods matching the label selector sel.
func (c *Cluster) deletePods(ctx context.Context, sel string) error {
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		opts := metav1.DeleteOptions{}
		switch g := p.DeletionGracePeriodSeconds; {
		case p.DeletionTimestamp != nil && g != nil && *g > drainGrace:
			// Already terminating with a long grace (a spec deleted it
			// with its own 300 s): the kubelet does not shorten a stop it
			// has begun, so the API object goes now, and the kubelet's
			// stop and removeSandboxes tear the pod down (CNI DEL
			// included).
			force := int64(0)
			opts.GracePeriodSeconds = &force
			c.t.Logf("cluster: pod %s/%s was terminating with %d s of grace; deleted at once", p.Namespace, p.Name, *g)
		case p.DeletionTimestamp != nil:
		default:
			if g := p.Spec.TerminationGracePeriodSeconds; g == nil || *g > drainGrace {
				grace := drainGrace
				opts.GracePeriodSeconds = &grace
			}
		}
		if err := c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, opts); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// waitPodsGone waits until no pod matches sel, or ctx (deleteAllPods's
// two minutes) ends; the error then names the pods left.
func (c *Cluster) waitPodsGone(ctx context.Context, sel string) error {
	for {
		pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return fmt.Errorf("waiting for pods (%s) to go: %w", sel, err)
		}
		if len(pods.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			var names []string
			for _, p := range pods.Items {
				names = append(names, p.Namespace+"/"+p.Name)
			}
			return fmt.Errorf("pods not deleted after 2m: %v", names)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
