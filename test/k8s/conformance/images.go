package conformance

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/podnet/podnet/test/k8s/hostimage"
	"github.com/podnet/podnet/test/k8s/ociimage"
)

// The images the selected specs run, under the names e2e.test asks for
// (k8s.io/kubernetes/test/utils/image at v1.34.4; TestDryRun checks
// them against e2e.test --list-images). Each is assembled here from a Go
// build or from the machine's Debian packages; none is pulled.
const (
	// AgnhostImage: agnhost built from k8s.io/kubernetes, porter's TLS
	// pair in its working directory, busybox's applets for the specs'
	// shell loops, and dig, getent, curl, GNU wget and OpenBSD's nc from
	// Debian (the DNS probes run getent in it too: /etc/hosts entries).
	AgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.56"
	// JessieDnsutilsImage: what the DNS probes run in it, dig and getent
	// (glibc's, reading /etc/hosts first as Debian's nsswitch.conf says),
	// and busybox's applets for the probe loop.
	JessieDnsutilsImage = "registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7"
	// BusyBoxImage: Debian's static busybox with its applets.
	BusyBoxImage = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
	// PauseImage: the harness's static pause program (cmd/pause), under
	// the name the suite gives its pause containers.
	PauseImage = "registry.k8s.io/pause:3.10.1"
	// RegressionImage: the program of test/images/regression-issue-74839
	// (a raw-socket client that provokes conntrack's invalid state).
	RegressionImage = "registry.k8s.io/e2e-test-images/regression-issue-74839:1.2"
	// IptablesImage: what KubeProxy's CLOSE_WAIT spec runs in this
	// image on a node's network, conntrack from Debian, with busybox
	// for sleep, sh and grep.
	IptablesImage = "registry.k8s.io/build-image/distroless-iptables:v0.7.14"
	// NginxImage: Debian's nginx (1.22, not the 1.14 of the real image:
	// the specs that run it only need a web server that runs), taken from
	// its package unpacked, never installed, with a configuration of its
	// own serving one page on port 80.
	NginxImage = "registry.k8s.io/e2e-test-images/nginx:1.14-4"
)

// Images are the names of the images Build makes, in its order.
var Images = []string{AgnhostImage, JessieDnsutilsImage, BusyBoxImage, PauseImage, RegressionImage, IptablesImage, NginxImage}

// busybox is where Debian's busybox-static puts its program.
const busybox = "/bin/busybox"

// hostPackages are the Debian packages whose programs the images hold,
// by a program of each.
var hostPackages = map[string]string{
	busybox:               "busybox-static",
	"/usr/bin/dig":        "bind9-dnsutils",
	"/usr/bin/curl":       "curl",
	"/usr/bin/wget":       "wget",
	"/usr/bin/getent":     "libc-bin",
	"/usr/sbin/conntrack": "conntrack",
	openbsdNC:             "netcat-openbsd",
	dash:                  "dash",
}

// dash is the tool images' /bin/sh. Debian's static busybox is built as
// a standalone shell: where /proc is mounted, as in every container, its
// sh runs its own applet for a command before one on $PATH, so with it as
// /bin/sh the specs' wget would be busybox's (which crashes) and nc
// busybox's (which has no -u), whatever the image holds.
const dash = "/usr/bin/dash"

// openbsdNC is the nc the real agnhost image has (Alpine's
// netcat-openbsd): the specs' `nc -u -w 1` sends a datagram and prints
// the answer, which Debian's busybox nc, without -u, cannot.
const openbsdNC = "/usr/bin/nc.openbsd"

// Sources are what Build makes the images from: programs built from Go
// modules, and the working tree of k8s.io/kubernetes for porter's
// certificate.
type Sources struct {
	// Agnhost and Regression are the programs of agnhost and
	// regression-issue-74839 (cluster.E2EBinaries builds them).
	Agnhost, Regression string
	// Pause is the harness's pause program.
	Pause string
	// CoreDNS, when set, is a static coredns program, which agnhost's
	// image holds as /coredns as the real one does (the DNS specs that
	// start a DNS server of their own run it).
	CoreDNS string
	// KubernetesDir is k8s.io/kubernetes's module directory at the
	// release e2e.test is built from.
	KubernetesDir string
}

// Build writes one archive per image into dir and returns their paths,
// installing the Debian packages whose programs the images hold when they
// are missing.
func Build(dir string, src Sources, logf func(string, ...any)) ([]string, error) {
	if err := ensureHostPackages(logf); err != nil {
		return nil, err
	}
	imgs, err := images(src, dir)
	if err != nil {
		return nil, err
	}
	var archives []string
	for _, img := range imgs {
		name := strings.NewReplacer("/", "_", ":", "_").Replace(img.Name) + ".tar"
		p := filepath.Join(dir, name)
		if err := writeArchive(p, img); err != nil {
			return nil, fmt.Errorf("image %s: %w", img.Name, err)
		}
		archives = append(archives, p)
	}
	return archives, nil
}

func writeArchive(path string, img ociimage.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = ociimage.Write(f, img)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// images describes the images; work is a directory to unpack packages in.
func images(src Sources, work string) ([]ociimage.Image, error) {
	applets, err := busyboxApplets()
	if err != nil {
		return nil, err
	}
	bb, err := hostimage.Files(busybox)
	if err != nil {
		return nil, err
	}
	agnhost, err := agnhostImage(src, bb, applets)
	if err != nil {
		return nil, err
	}
	jessie, err := toolImage(JessieDnsutilsImage, bb, applets, []string{"/usr/bin/dig", "/usr/bin/getent"}, nil)
	if err != nil {
		return nil, err
	}
	jessie.Files = append(jessie.Files, ociimage.File{Path: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte(nsswitch)})
	jessie.Cmd = []string{"sh"}
	pause, err := os.ReadFile(src.Pause)
	if err != nil {
		return nil, err
	}
	regression, err := os.ReadFile(src.Regression)
	if err != nil {
		return nil, err
	}
	iptables, err := toolImage(IptablesImage, bb, applets, []string{"/usr/sbin/conntrack"}, nil)
	if err != nil {
		return nil, err
	}
	nginx, err := nginxImage(work)
	if err != nil {
		return nil, err
	}
	return []ociimage.Image{
		agnhost,
		jessie,
		{Name: BusyBoxImage, Files: bb, Symlinks: applets, Dirs: []string{"/tmp"}, Cmd: []string{"sh"}},
		{Name: PauseImage, Entrypoint: []string{"/pause"}, Files: []ociimage.File{{Path: "/pause", Mode: 0o755, Data: pause}}},
		{Name: RegressionImage, Entrypoint: []string{"/regression-issue-74839"},
			Files: []ociimage.File{{Path: "/regression-issue-74839", Mode: 0o755, Data: regression}}},
		iptables,
		nginx,
	}, nil
}

// nsswitch is Debian's hosts line: /etc/hosts (which kubelet writes)
// before DNS, as getent in the real jessie image reads them.
const nsswitch = "passwd: files\ngroup: files\nhosts: files dns\n"

// agnhostImage is agnhost as the real image lays it out: /agnhost the
// entrypoint with pause the default argument, porter's localhost.crt and
// localhost.key in the working directory (/), /uploads for netexec.
func agnhostImage(src Sources, bb []ociimage.File, applets []ociimage.Symlink) (ociimage.Image, error) {
	img, err := toolImage(AgnhostImage, bb, applets, []string{"/usr/bin/dig", "/usr/bin/getent", "/usr/bin/curl", "/usr/bin/wget", openbsdNC},
		[]ociimage.Symlink{{Path: "/usr/bin/nc", Target: filepath.Base(openbsdNC)}})
	if err != nil {
		return img, err
	}
	img.Files = append(img.Files, ociimage.File{Path: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte(nsswitch)})
	prog, err := os.ReadFile(src.Agnhost)
	if err != nil {
		return img, err
	}
	img.Files = append(img.Files, ociimage.File{Path: "/agnhost", Mode: 0o755, Data: prog})
	for _, name := range []string{"localhost.crt", "localhost.key"} {
		data, err := os.ReadFile(filepath.Join(src.KubernetesDir, "test/images/agnhost/porter", name))
		if err != nil {
			return img, err
		}
		img.Files = append(img.Files, ociimage.File{Path: "/" + name, Mode: 0o644, Data: data})
	}
	if src.CoreDNS != "" {
		data, err := os.ReadFile(src.CoreDNS)
		if err != nil {
			return img, err
		}
		img.Files = append(img.Files, ociimage.File{Path: "/coredns", Mode: 0o755, Data: data})
	}
	img.Dirs = append(img.Dirs, "/uploads")
	img.Entrypoint, img.Cmd = []string{"/agnhost"}, []string{"pause"}
	return img, nil
}

// toolImage is busybox with its applets, dash as /bin/sh, and the given
// host programs and links, which replace an applet of the same path (GNU
// wget for busybox's, nc for OpenBSD's).
func toolImage(name string, bb []ociimage.File, applets []ociimage.Symlink, programs []string, links []ociimage.Symlink) (ociimage.Image, error) {
	files, err := hostimage.Files(append([]string{dash}, programs...)...)
	if err != nil {
		return ociimage.Image{}, err
	}
	have := map[string]bool{}
	for _, f := range files {
		have[f.Path] = true
	}
	for _, f := range bb {
		if !have[f.Path] {
			files = append(files, f)
			have[f.Path] = true
		}
	}
	links = append([]ociimage.Symlink{{Path: "/bin/sh", Target: dash}}, links...)
	for _, l := range links {
		have[l.Path] = true
	}
	for _, l := range applets {
		if !have[l.Path] && !have[sameDirAs(l.Path)] {
			links = append(links, l)
		}
	}
	return ociimage.Image{Name: name, Files: files, Symlinks: links, Dirs: []string{"/tmp"}}, nil
}

// sameDirAs maps an applet's path to where a program of that name would
// be among the host programs: Debian's merged /usr puts /bin/x at
// /usr/bin/x, so busybox's /bin/x applet and a host /usr/bin/x are one
// command.
func sameDirAs(p string) string {
	for _, d := range []string{"/bin/", "/sbin/"} {
		if strings.HasPrefix(p, d) {
			return "/usr" + p
		}
	}
	return p
}

// busyboxApplets returns a link to busybox for each applet, at the path
// `busybox --list-full` gives it.
func busyboxApplets() ([]ociimage.Symlink, error) {
	out, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", busybox, err)
	}
	var links []ociimage.Symlink
	for _, l := range strings.Fields(string(out)) {
		p := "/" + strings.TrimPrefix(l, "/")
		if p == busybox {
			continue
		}
		links = append(links, ociimage.Symlink{Path: p, Target: busybox})
	}
	if len(links) == 0 {
		return nil, errors.New(busybox + " lists no applets")
	}
	sort.Slice(links, func(i, j int) bool { return links[i].Path < links[j].Path })
	return links, nil
}

// ensureHostPackages installs the Debian packages of hostPackages whose
// program is missing.
func ensureHostPackages(logf func(string, ...any)) error {
	var missing []string
	for prog, pkg := range hostPackages {
		if _, err := os.Stat(prog); err != nil {
			missing = append(missing, pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(missing)
	logf("installing %s with apt-get for the e2e images", strings.Join(missing, " "))
	for _, args := range [][]string{{"update", "-qq"}, append([]string{"install", "-y", "-qq"}, missing...)} {
		// Another test may be installing too (the cluster's containerd):
		// wait for dpkg's lock rather than fail.
		cmd := exec.Command("apt-get", append([]string{"-o", "DPkg::Lock::Timeout=600"}, args...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// KubernetesDir returns k8s.io/kubernetes's module directory at the
// version the wrapper module e2ebuildDir pins, downloading the module
// first when the cache lacks it (e2e.test's build has it already).
func KubernetesDir(e2ebuildDir string) (string, error) {
	for _, args := range [][]string{{"mod", "download", "k8s.io/kubernetes"}, {"list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes"}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = e2ebuildDir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("go %s in %s: %w", strings.Join(args, " "), e2ebuildDir, err)
		}
		if args[0] == "list" {
			if dir := strings.TrimSpace(string(out)); dir != "" {
				return dir, nil
			}
		}
	}
	return "", errors.New("k8s.io/kubernetes: no module directory")
}

// nginxConf serves /usr/share/nginx/html on port 80, errors logged to
// the container's output; the workers run as root, the image's user.
const nginxConf = `user root;
worker_processes 1;
error_log stderr;
pid /run/nginx.pid;
events { worker_connections 256; }
http {
	types { text/html html; }
	default_type application/octet-stream;
	access_log off;
	server {
		listen 80;
		root /usr/share/nginx/html;
		index index.html;
	}
}
`

// nginxImage is Debian's nginx package, downloaded and unpacked in work
// (installing it would start a server on the machine), with the files
// its build expects: a configuration, a page, its log and temporary
// directories, and root's passwd entry for its user directive.
func nginxImage(work string) (ociimage.Image, error) {
	root, err := unpackDeb(work, "nginx")
	if err != nil {
		return ociimage.Image{}, err
	}
	files, err := hostimage.Extracted(root, "/usr/sbin/nginx")
	if err != nil {
		return ociimage.Image{}, err
	}
	files = append(files,
		ociimage.File{Path: "/etc/nginx/nginx.conf", Mode: 0o644, Data: []byte(nginxConf)},
		ociimage.File{Path: "/usr/share/nginx/html/index.html", Mode: 0o644, Data: []byte("<html><body>nginx</body></html>\n")},
		ociimage.File{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\n")},
		ociimage.File{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\n")},
		ociimage.File{Path: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte(nsswitch)},
	)
	return ociimage.Image{
		Name:  NginxImage,
		Files: files,
		Dirs:  []string{"/tmp", "/run", "/var/log/nginx", "/var/lib/nginx"},
		Cmd:   []string{"nginx", "-g", "daemon off;"},
	}, nil
}

// unpackDeb downloads Debian's package pkg into work with apt-get (its
// lists updated once if the download fails) and unpacks it there,
// returning the directory it is unpacked in. Nothing is installed.
func unpackDeb(work, pkg string) (string, error) {
	dl := filepath.Join(work, "deb-"+pkg)
	if err := os.MkdirAll(dl, 0o755); err != nil {
		return "", err
	}
	download := func() error {
		cmd := exec.Command("apt-get", "download", "-qq", pkg)
		cmd.Dir = dl
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get download %s: %w\n%s", pkg, err, out)
		}
		return nil
	}
	if err := download(); err != nil {
		if out, uerr := exec.Command("apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-qq").CombinedOutput(); uerr != nil {
			return "", fmt.Errorf("%v; apt-get update: %v\n%s", err, uerr, out)
		}
		if err := download(); err != nil {
			return "", err
		}
	}
	debs, err := filepath.Glob(filepath.Join(dl, pkg+"_*.deb"))
	if err != nil || len(debs) != 1 {
		return "", fmt.Errorf("apt-get download %s left %v", pkg, debs)
	}
	root := filepath.Join(dl, "root")
	if out, err := exec.Command("dpkg-deb", "-x", debs[0], root).CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb -x %s: %w\n%s", debs[0], err, out)
	}
	return root, nil
}
