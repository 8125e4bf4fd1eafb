package interop

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/podnet/podnet/cni"
)

// attachment is what a runtime knows about one attachment, in neither
// library's types, so one test can drive both.
type attachment struct {
	ContainerID string
	NetNS       string
	IfName      string
	Args        [][2]string
	CapArgs     map[string]any
}

// runner is a CNI runtime library under test: podnet's cni.Runtime or
// upstream's libcni. Configurations are conflist documents, parsed by the
// runner's own library; results are JSON in the result's own version.
type runner interface {
	String() string
	add(ctx context.Context, conf []byte, a attachment) ([]byte, error)
	check(ctx context.Context, conf []byte, a attachment) error
	del(ctx context.Context, conf []byte, a attachment) error
	status(ctx context.Context, conf []byte) error
	gc(ctx context.Context, conf []byte, valid []attachment) error
	versionInfo(ctx context.Context, plugin string) ([]string, error)
	cachedResult(conf []byte, a attachment) ([]byte, error)
}

// inNode runs f in node's namespace when there is one: plugins then see
// that namespace as the host, so host-side links, routes and firewall
// rules stay in a namespace the test made.
func inNode(node *netNS, f func() error) error {
	if node == nil {
		return f()
	}
	return node.do(f)
}

// podnetRunner drives podnet's cni.Runtime.
type podnetRunner struct {
	rt   *cni.Runtime
	node *netNS
}

func newPodnetRunner(path []string, cacheDir string, node *netNS) *podnetRunner {
	return &podnetRunner{rt: cni.NewRuntime(path, cni.WithCacheDir(cacheDir)), node: node}
}

func (p *podnetRunner) String() string { return "podnet" }

func (p *podnetRunner) list(conf []byte) (*cni.NetworkConfigList, error) {
	return cni.ParseNetworkConfigList(conf, "test conflist")
}

func (p *podnetRunner) rc(a attachment) *cni.RuntimeConf {
	return &cni.RuntimeConf{ContainerID: a.ContainerID, NetNS: a.NetNS, IfName: a.IfName, Args: a.Args, CapabilityArgs: a.CapArgs}
}

func (p *podnetRunner) add(ctx context.Context, conf []byte, a attachment) ([]byte, error) {
	list, err := p.list(conf)
	if err != nil {
		return nil, err
	}
	var res *cni.Result
	err = inNode(p.node, func() error {
		res, err = p.rt.AddNetworkList(ctx, list, p.rc(a))
		return err
	})
	if err != nil {
		return nil, err
	}
	return res.Bytes(), nil
}

func (p *podnetRunner) check(ctx context.Context, conf []byte, a attachment) error {
	list, err := p.list(conf)
	if err != nil {
		return err
	}
	return inNode(p.node, func() error { return p.rt.CheckNetworkList(ctx, list, p.rc(a)) })
}

func (p *podnetRunner) del(ctx context.Context, conf []byte, a attachment) error {
	list, err := p.list(conf)
	if err != nil {
		return err
	}
	return inNode(p.node, func() error { return p.rt.DelNetworkList(ctx, list, p.rc(a)) })
}

func (p *podnetRunner) status(ctx context.Context, conf []byte) error {
	list, err := p.list(conf)
	if err != nil {
		return err
	}
	return inNode(p.node, func() error { return p.rt.StatusNetworkList(ctx, list) })
}

func (p *podnetRunner) gc(ctx context.Context, conf []byte, valid []attachment) error {
	list, err := p.list(conf)
	if err != nil {
		return err
	}
	keep := make([]cni.GCAttachment, 0, len(valid))
	for _, v := range valid {
		keep = append(keep, cni.GCAttachment{ContainerID: v.ContainerID, IfName: v.IfName})
	}
	return inNode(p.node, func() error { return p.rt.GCNetworkList(ctx, list, keep) })
}

func (p *podnetRunner) versionInfo(ctx context.Context, plugin string) ([]string, error) {
	vi, err := p.rt.GetVersionInfo(ctx, plugin)
	if err != nil {
		return nil, err
	}
	return vi.SupportedVersions, nil
}

func (p *podnetRunner) cachedResult(conf []byte, a attachment) ([]byte, error) {
	list, err := p.list(conf)
	if err != nil {
		return nil, err
	}
	att, err := p.rt.CachedAttachment(list.Name, p.rc(a))
	if err != nil || att == nil || att.Result == nil {
		return nil, err
	}
	res, err := att.Result.ConvertTo(list.CNIVersion)
	if err != nil {
		return nil, err
	}
	return res.Bytes(), nil
}

// libcniRunner drives upstream's libcni.CNIConfig.
type libcniRunner struct {
	c    *libcni.CNIConfig
	node *netNS
}

func newLibcniRunner(path []string, cacheDir string, node *netNS) *libcniRunner {
	return &libcniRunner{c: libcni.NewCNIConfigWithCacheDir(path, cacheDir, nil), node: node}
}

func (l *libcniRunner) String() string { return "libcni" }

func (l *libcniRunner) parse(conf []byte) (*libcni.NetworkConfigList, error) {
	return libcni.NetworkConfFromBytes(conf)
}

func (l *libcniRunner) rc(a attachment) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: a.ContainerID, NetNS: a.NetNS, IfName: a.IfName, Args: a.Args, CapabilityArgs: a.CapArgs}
}

func (l *libcniRunner) add(ctx context.Context, conf []byte, a attachment) ([]byte, error) {
	list, err := l.parse(conf)
	if err != nil {
		return nil, err
	}
	var res types.Result
	err = inNode(l.node, func() error {
		res, err = l.c.AddNetworkList(ctx, list, l.rc(a))
		return err
	})
	if err != nil {
		return nil, err
	}
	return json.Marshal(res)
}

func (l *libcniRunner) check(ctx context.Context, conf []byte, a attachment) error {
	list, err := l.parse(conf)
	if err != nil {
		return err
	}
	return inNode(l.node, func() error { return l.c.CheckNetworkList(ctx, list, l.rc(a)) })
}

func (l *libcniRunner) del(ctx context.Context, conf []byte, a attachment) error {
	list, err := l.parse(conf)
	if err != nil {
		return err
	}
	return inNode(l.node, func() error { return l.c.DelNetworkList(ctx, list, l.rc(a)) })
}

func (l *libcniRunner) status(ctx context.Context, conf []byte) error {
	list, err := l.parse(conf)
	if err != nil {
		return err
	}
	return inNode(l.node, func() error { return l.c.GetStatusNetworkList(ctx, list) })
}

func (l *libcniRunner) gc(ctx context.Context, conf []byte, valid []attachment) error {
	list, err := l.parse(conf)
	if err != nil {
		return err
	}
	args := &libcni.GCArgs{}
	for _, v := range valid {
		args.ValidAttachments = append(args.ValidAttachments, types.GCAttachment{ContainerID: v.ContainerID, IfName: v.IfName})
	}
	return inNode(l.node, func() error { return l.c.GCNetworkList(ctx, list, args) })
}

func (l *libcniRunner) versionInfo(ctx context.Context, plugin string) ([]string, error) {
	vi, err := l.c.GetVersionInfo(ctx, plugin)
	if err != nil {
		return nil, err
	}
	return vi.SupportedVersions(), nil
}

func (l *libcniRunner) cachedResult(conf []byte, a attachment) ([]byte, error) {
	list, err := l.parse(conf)
	if err != nil {
		return nil, err
	}
	res, err := l.c.GetNetworkListCachedResult(list, l.rc(a))
	if err != nil || res == nil {
		return nil, err
	}
	return json.Marshal(res)
}

// newRunner makes a runner of one library over the plugin dirs path,
// with its result cache in cacheDir and, unless node is nil, running
// plugins in node's namespace.
type newRunner func(path []string, cacheDir string, node *netNS) runner

// bothLibraries are the two libraries every comparison runs, podnet first.
var bothLibraries = []newRunner{
	func(p []string, c string, n *netNS) runner { return newPodnetRunner(p, c, n) },
	func(p []string, c string, n *netNS) runner { return newLibcniRunner(p, c, n) },
}

// libraryName is "podnet" or "libcni".
func libraryName(mk newRunner) string { return mk(nil, "", nil).String() }

// mustJSON is json.Marshal for values that cannot fail to encode.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", v, err))
	}
	return b
}
