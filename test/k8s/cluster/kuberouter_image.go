package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/podnet/podnet/test/k8s/hostimage"
	"github.com/podnet/podnet/test/k8s/ociimage"
)

// The machine's programs kube-router's policy controller execs: iptables
// (-save, -restore, and go-iptables' iptables) as the nft variant, the
// one the machine's iptables alternative and so the nodes' kube-proxy
// use (two variants on one node would each see only their own rules),
// and ipset.
const (
	xtablesNFT   = "/usr/sbin/xtables-nft-multi"
	ipsetProg    = "/usr/sbin/ipset"
	kubeRouterIn = "/usr/local/bin/kube-router"
)

// xtablesLinks are the names xtables-nft-multi answers to that
// kube-router runs (IPv4 and, were --enable-ipv6 set, IPv6).
var xtablesLinks = []string{
	"iptables", "iptables-save", "iptables-restore",
	"ip6tables", "ip6tables-save", "ip6tables-restore",
}

// writeKubeRouterImage writes kube-router's image to archive: the static
// kube-router, the machine's xtables-nft-multi with its extensions
// (which it dlopens from /usr/lib/<triplet>/xtables) and ipset, each
// with its libraries. ipset is installed with apt-get if the machine
// lacks it.
func writeKubeRouterImage(logf func(string, ...any), prog, archive string) error {
	if err := ensureIPSet(logf); err != nil {
		return err
	}
	img, err := kubeRouterImage(prog)
	if err != nil {
		return err
	}
	f, err := os.Create(archive)
	if err != nil {
		return err
	}
	err = ociimage.Write(f, img)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// kubeRouterImage is the image's content, the machine's files read.
func kubeRouterImage(prog string) (ociimage.Image, error) {
	data, err := os.ReadFile(prog)
	if err != nil {
		return ociimage.Image{}, err
	}
	files := []ociimage.File{{Path: kubeRouterIn, Mode: 0o755, Data: data}}
	progs, err := hostimage.Files(xtablesNFT, ipsetProg)
	if err != nil {
		return ociimage.Image{}, err
	}
	exts, err := filepath.Glob("/usr/lib/*-linux-gnu/xtables/*.so")
	if err != nil || len(exts) == 0 {
		return ociimage.Image{}, fmt.Errorf("no iptables extensions in /usr/lib/*-linux-gnu/xtables (%v)", err)
	}
	loaded, err := hostimage.Loaded(exts...)
	if err != nil {
		return ociimage.Image{}, err
	}
	files = mergeFiles(files, progs, loaded)
	// -p tcp and the like are looked up by name.
	if p, err := os.ReadFile("/etc/protocols"); err == nil {
		files = mergeFiles(files, []ociimage.File{{Path: "/etc/protocols", Mode: 0o644, Data: p}})
	}
	var links []ociimage.Symlink
	for _, l := range xtablesLinks {
		links = append(links, ociimage.Symlink{Path: "/usr/sbin/" + l, Target: filepath.Base(xtablesNFT)})
	}
	return ociimage.Image{
		Name: KubeRouterImage, Files: files, Symlinks: links,
		Dirs:       []string{"/tmp", "/run"},
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Entrypoint: []string{kubeRouterIn},
	}, nil
}

// mergeFiles joins file lists, the first of a path kept, sorted by path.
func mergeFiles(lists ...[]ociimage.File) []ociimage.File {
	seen := map[string]bool{}
	var out []ociimage.File
	for _, l := range lists {
		for _, f := range l {
			if !seen[f.Path] {
				seen[f.Path] = true
				out = append(out, f)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// ensureIPSet installs Debian's ipset when the machine lacks it (the
// image copies the machine's program), as the conformance images install
// their host packages.
func ensureIPSet(logf func(string, ...any)) error {
	if _, err := os.Stat(ipsetProg); err == nil {
		return nil
	}
	logf("installing ipset with apt-get for kube-router's image")
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "ipset"}} {
		// Another test may be installing too: wait for dpkg's lock.
		cmd := exec.Command("apt-get", append([]string{"-o", "DPkg::Lock::Timeout=600"}, args...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	if _, err := os.Stat(ipsetProg); err != nil {
		return fmt.Errorf("apt-get installed ipset, but: %w", err)
	}
	return nil
}
