package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Sandbox is a pod sandbox as containerd reports it through CRI.
type Sandbox struct {
	ID        string
	PodUID    string
	Namespace string
	Name      string
	Ready     bool
	// NetNS is the path of the sandbox's network namespace (empty once
	// the sandbox is stopped, or for host-network pods).
	NetNS string
}

// criConn opens a CRI connection to the node's containerd.
func (n *Node) criConn() (*grpc.ClientConn, runtimeapi.RuntimeServiceClient, error) {
	conn, err := grpc.NewClient("unix://"+n.containerdSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return conn, runtimeapi.NewRuntimeServiceClient(conn), nil
}

// Sandboxes returns every pod sandbox the node's containerd has, ready or
// not.
func (n *Node) Sandboxes(ctx context.Context) ([]Sandbox, error) {
	conn, rs, err := n.criConn()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	list, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("CRI ListPodSandbox: %w", err)
	}
	var out []Sandbox
	for _, sb := range list.Items {
		md := sb.GetMetadata()
		s := Sandbox{ID: sb.Id, PodUID: md.GetUid(), Namespace: md.GetNamespace(), Name: md.GetName(),
			Ready: sb.State == runtimeapi.PodSandboxState_SANDBOX_READY}
		st, err := rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.Id, Verbose: true})
		hostNetwork := st.GetStatus().GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE
		if err == nil && !hostNetwork {
			s.NetNS = sandboxNetNS(st.GetInfo()["info"])
		}
		out = append(out, s)
	}
	return out, nil
}

// sandboxNetNS reads the network namespace path from containerd's
// verbose sandbox status (its "info" JSON): the sandbox's runtime spec
// names it (netNamespacePath is newer containerds' own field).
func sandboxNetNS(info string) string {
	var v struct {
		NetNSPath   string `json:"netNamespacePath"`
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct{ Type, Path string }
			}
		} `json:"runtimeSpec"`
	}
	_ = json.Unmarshal([]byte(info), &v)
	if v.NetNSPath != "" {
		return v.NetNSPath
	}
	for _, ns := range v.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" {
			return ns.Path
		}
	}
	return ""
}

// Exec runs cmd in the running container called container of pod
// namespace/pod, which must run on this node, through the node's CRI as
// kubelet's exec would, and returns its output (stdout then stderr). A
// non-zero exit is an error.
func (n *Node) Exec(ctx context.Context, namespace, pod, container string, timeout time.Duration, cmd ...string) ([]byte, error) {
	conn, rs, err := n.criConn()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	list, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{
			"io.kubernetes.pod.namespace": namespace, "io.kubernetes.pod.name": pod, "io.kubernetes.container.name": container,
		},
	}})
	if err != nil {
		return nil, fmt.Errorf("CRI ListContainers: %w", err)
	}
	if len(list.Containers) != 1 {
		return nil, fmt.Errorf("%d running containers %s in pod %s/%s, want 1", len(list.Containers), container, namespace, pod)
	}
	resp, err := rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{
		ContainerId: list.Containers[0].Id, Cmd: cmd, Timeout: int64(timeout / time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("CRI ExecSync %v in %s/%s: %w", cmd, namespace, pod, err)
	}
	out := append(resp.Stdout, resp.Stderr...)
	if resp.ExitCode != 0 {
		return out, fmt.Errorf("%v in %s/%s exited %d: %s", cmd, namespace, pod, resp.ExitCode, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// PodnetCommand is the command Podnet runs, for a caller that streams
// its output (podnet flows --follow) or ends it itself.
func (n *Node) PodnetCommand(ctx context.Context, args ...string) *exec.Cmd {
	bin := filepath.Join(n.c.Dir, "podnet-bin", "podnet")
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.NetNS, "--", bin}, args...)...)
}

// Podnet runs podnet's CLI (the binary of the image the cluster runs) in
// the node's network namespace, as a user on the node would, and returns
// its combined output. It sees the machine's files, not the node's own
// (a bbolt store is named by its HostPath, as IPAMStoreSpec does).
func (n *Node) Podnet(ctx context.Context, args ...string) ([]byte, error) {
	out, err := n.PodnetCommand(ctx, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("podnet %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// CNICacheEntries returns the files of the node's CNI result cache (its
// /var/lib/cni) that belong to the container (sandbox) id:
// results/<network>-<id>-<ifname>.
func (n *Node) CNICacheEntries(id string) []string {
	files, _ := filepath.Glob(filepath.Join(n.CNICacheDir, "results", "*-"+id+"-*"))
	var out []string
	for _, f := range files {
		if _, err := os.Stat(f); err == nil {
			out = append(out, f)
		}
	}
	return out
}

// NetNSPins returns the files pinning pods' network namespaces on the
// node: the harness's containerd keeps them under its state
// directory (netns_mounts_under_state_dir), so every one is this
// cluster's. The pins are mounts in the node's mount namespace; the
// files stand for them here.
func (n *Node) NetNSPins() ([]string, error) {
	ents, err := os.ReadDir(n.netnsPinDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		out = append(out, filepath.Join(n.netnsPinDir(), e.Name()))
	}
	return out, nil
}

func (n *Node) netnsPinDir() string {
	return filepath.Join(n.Root, "containerd/state/io.containerd.grpc.v1.cri/netns")
}

// RemoveEmptyNetNSPin removes a pin NetNSPins returned whose namespace
// holds no interface but lo, or that pins nothing (a file containerd made
// before it mounted a namespace on it): one containerd made for a sandbox
// and then forgot (it was killed before the sandbox was recorded). A namespace
// with an interface is refused, as removing it would destroy the
// interface and hide whatever left it there.
func (n *Node) RemoveEmptyNetNSPin(pin string) error {
	if filepath.Dir(pin) != n.netnsPinDir() {
		return fmt.Errorf("%s is not a pin of %s's containerd", pin, n.Name)
	}
	// The pin is a mount in the node's mount namespace: it is looked into
	// and unmounted there.
	mnt := "--mount=" + n.mountNS
	// containerd makes the file, then mounts the namespace on it; killed
	// in between, it leaves a file that pins nothing.
	if exec.Command("nsenter", mnt, "--", "mountpoint", "-q", pin).Run() != nil {
		return os.Remove(pin)
	}
	// nsenter opens every namespace file before it enters any, so the pin
	// is opened by a second nsenter, inside the mount namespace.
	out, err := exec.Command("nsenter", mnt, "--", "nsenter", "--net="+pin, "ip", "-o", "link", "show").CombinedOutput()
	if err != nil {
		return fmt.Errorf("links in %s: %w: %s", pin, err, strings.TrimSpace(string(out)))
	}
	var links []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.TrimSuffix(f[1], ":") != "lo" {
			links = append(links, strings.TrimSuffix(f[1], ":"))
		}
	}
	if len(links) > 0 {
		return fmt.Errorf("network namespace %s holds %v, not removing it", pin, links)
	}
	if err := run("nsenter", mnt, "--", "umount", "-l", pin); err != nil {
		return err
	}
	return os.Remove(pin)
}
