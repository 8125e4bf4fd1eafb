package cnpconformance

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/podnet/podnet/test/k8s/hostimage"
	"github.com/podnet/podnet/test/k8s/ociimage"
)

// AgnhostImage is the one image the suite's pods run (its
// base/manifests.yaml at v0.3.0): a client container that idles, and
// servers started through `/bin/bash -c "/agnhost ..."`; the probes exec
// `/agnhost connect` in the client.
const AgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.45"

// bash is Debian's bash, which the pods' servers are started with.
const bash = "/usr/bin/bash"

// program is where the agnhost program lies in the image when /agnhost
// is the porter wrapper.
const program = "/agnhost-program"

// porterWithoutSCTP is /agnhost in the image built for a kernel without
// SCTP. The base manifests run `agnhost porter` with SCTP ports alone in
// two containers of every pod; there porter cannot listen and exits, the
// container restarts for ever, its pod is never ready and the suite's
// setup fails before any test runs. So porter asked to serve only SCTP
// says why it serves nothing and idles instead (agnhost pause), keeping
// the pod as the manifests describe it; the tests that would probe those
// ports are skipped by name (SCTPSkips). Every other command is agnhost
// itself.
const porterWithoutSCTP = `#!/usr/bin/bash
# Built by podnet's test/k8s (cnpconformance) for a kernel without SCTP.
if [[ $1 == porter ]]; then
	sctp= other=
	for v in $(compgen -e); do
		case $v in
		SERVE_SCTP_PORT_*) sctp+=" ${v#SERVE_SCTP_PORT_}" ;;
		SERVE_PORT_* | SERVE_TLS_PORT_*) other=1 ;;
		esac
	done
	if [[ -n $sctp && -z $other ]]; then
		echo "agnhost porter: no SCTP in this kernel: not serving SCTP port(s)$sctp; idling" >&2
		exec ` + program + ` pause
	fi
fi
exec ` + program + ` "$@"
`

// Image is the suite's agnhost image: the agnhost program (the one
// e2ebuild builds, Kubernetes v1.34.4's 2.56: the subcommands and flags
// the suite uses, connect, serve-hostname, netexec and porter, are
// 2.45's) as the entrypoint with pause as the default argument, and
// Debian's bash with its libraries at /bin/bash. With kernelSCTP false,
// /agnhost is porterWithoutSCTP and the program lies beside it.
func Image(agnhost string, kernelSCTP bool) (ociimage.Image, error) {
	files, err := hostimage.Files(bash)
	if err != nil {
		return ociimage.Image{}, err
	}
	prog, err := os.ReadFile(agnhost)
	if err != nil {
		return ociimage.Image{}, err
	}
	if kernelSCTP {
		files = append(files, ociimage.File{Path: "/agnhost", Mode: 0o755, Data: prog})
	} else {
		files = append(files,
			ociimage.File{Path: program, Mode: 0o755, Data: prog},
			ociimage.File{Path: "/agnhost", Mode: 0o755, Data: []byte(porterWithoutSCTP)})
	}
	return ociimage.Image{
		Name:       AgnhostImage,
		Files:      files,
		Symlinks:   []ociimage.Symlink{{Path: "/bin/bash", Target: bash}},
		Dirs:       []string{"/tmp"},
		Entrypoint: []string{"/agnhost"},
		Cmd:        []string{"pause"},
	}, nil
}

// WriteImage writes Image's archive into dir, for the cluster's
// LoadImages, and returns its path.
func WriteImage(dir, agnhost string, kernelSCTP bool) (string, error) {
	img, err := Image(agnhost, kernelSCTP)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "cnp-agnhost-2.45.tar")
	f, err := os.Create(p)
	if err != nil {
		return "", err
	}
	err = ociimage.Write(f, img)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("image %s: %w", AgnhostImage, err)
	}
	return p, nil
}
