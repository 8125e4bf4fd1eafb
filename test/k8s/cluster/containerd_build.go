package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Containerd is a containerd release the node can run: the distribution's
// (Debian 12: 1.6.20), or one built from the Go module proxy by a wrapper
// module of test/k8s (cbuild-1.7, cbuild-2) that pins it. runc is always
// the distribution's.
type Containerd struct {
	// Name is what PODNET_K8S_CONTAINERD selects: "1.6", "1.7" or "2.x".
	Name string
	// build is the wrapper module's directory; "" for the distribution's.
	build string
	// module is containerd's Go module at that release.
	module string
	// configVersion is the version of containerd's config file: 2 (read
	// by 1.x and 2.x), or 3 (2.x, where the CRI plugin's sections were
	// split and renamed).
	configVersion int
}

// The containerds the harness runs.
var (
	ContainerdDebian = Containerd{Name: "1.6", configVersion: 2}
	Containerd17     = Containerd{Name: "1.7", build: "cbuild-1.7", module: "github.com/containerd/containerd", configVersion: 2}
	Containerd2      = Containerd{Name: "2.x", build: "cbuild-2", module: "github.com/containerd/containerd/v2", configVersion: 3}
)

// Containerds are the containerds the harness can run, the distribution's
// first.
var Containerds = []Containerd{ContainerdDebian, Containerd17, Containerd2}

// containerdBuildTags drop the snapshotters that need cgo (btrfs) or that
// a node without those devices has no use for (devmapper, zfs, aufs, the
// last gone in 2.0), and the man page generator; the list is upstream's
// BUILDING.md. The build is static: CGO_ENABLED=0.
const containerdBuildTags = "no_btrfs no_devmapper no_zfs no_aufs urfave_cli_no_docs"

// containerdCommands are the programs built: the daemon, the runc shim of
// the same release (containerd finds it on its PATH), and ctr, which
// imports the images (a ctr of another release may not speak to it).
var containerdCommands = []string{"containerd", "containerd-shim-runc-v2", "ctr"}

// ContainerdFromEnv returns the containerd PODNET_K8S_CONTAINERD names,
// the distribution's when it is unset.
func ContainerdFromEnv() (Containerd, error) {
	name := os.Getenv("PODNET_K8S_CONTAINERD")
	if name == "" {
		return ContainerdDebian, nil
	}
	var names []string
	for _, cd := range Containerds {
		if cd.Name == name {
			return cd, nil
		}
		names = append(names, cd.Name)
	}
	return Containerd{}, fmt.Errorf("PODNET_K8S_CONTAINERD=%s: not one of %s", name, strings.Join(names, ", "))
}

// Version returns the release cd's wrapper module requires, read from its
// go.mod (the one place it is written), or "" for the distribution's.
func (cd Containerd) Version() (string, error) {
	if cd.build == "" {
		return "", nil
	}
	return wrapperRequire(cd.build, cd.module)
}

// wrapperRequire returns the version of module that the go.mod of the
// wrapper module in dir (relative to test/k8s) requires.
func wrapperRequire(dir, module string) (string, error) {
	mod, err := ModuleDir()
	if err != nil {
		return "", err
	}
	gomod := filepath.Join(mod, dir, "go.mod")
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == module {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s requires no %s", gomod, module)
}

// ContainerdBinaries returns the directory holding containerdCommands of
// cd's release, built into <cache root>/containerd-<version>/bin unless
// the cache has them from the same wrapper module, tags and toolchain
// (as KubeBinaries does: under a lock, the stamp written last). For the
// distribution's containerd it returns "": its programs are on $PATH.
func ContainerdBinaries(logf func(string, ...any), cd Containerd) (string, error) {
	version, err := cd.Version()
	if err != nil || version == "" {
		return "", err
	}
	b, err := newCachedBuild("containerd "+version, cd.build, "containerd-"+version)
	if err != nil {
		return "", err
	}
	b.tags = containerdBuildTags
	// Without it containerd reports the version of the module that
	// builds it, "(devel)".
	b.ldflags = fmt.Sprintf("-X %s/version.Version=%s", cd.module, version)
	for _, c := range containerdCommands {
		b.pkgs = append(b.pkgs, cd.module+"/cmd/"+c)
	}
	return b.get(logf)
}

// nodeContainerd returns the containerd opts (else PODNET_K8S_CONTAINERD)
// choose and the directory of its programs, built if need be ("" for the
// distribution's).
// It applies opts to o.
func nodeContainerd(t testing.TB, o *options, opts []Option) (Containerd, string) {
	t.Helper()
	cd, err := ContainerdFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	o.containerd = cd
	for _, opt := range opts {
		opt(o)
	}
	bin, err := ContainerdBinaries(t.Logf, o.containerd)
	if err != nil {
		t.Fatalf("containerd %s: %v", o.containerd.Name, err)
	}
	return o.containerd, bin
}

// Containerd returns the containerd the node runs.
func (c *Cluster) Containerd() Containerd { return c.containerd }

// containerdCommand returns the path of one of containerdCommands: in the
// built release's directory, else the bare name, found on $PATH.
func (c *Cluster) containerdCommand(name string) string {
	if c.containerdBin == "" {
		return name
	}
	return filepath.Join(c.containerdBin, name)
}

// containerdEnv puts the built release's directory first on containerd's
// PATH, where it looks for its shim (the distribution's is on PATH too).
func (c *Cluster) containerdEnv() []string {
	if c.containerdBin == "" {
		return nil
	}
	return []string{"PATH=" + c.containerdBin + string(os.PathListSeparator) + os.Getenv("PATH")}
}
