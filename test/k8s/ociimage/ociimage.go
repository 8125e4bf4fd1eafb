// Package ociimage writes a single-layer container image as an OCI image
// layout in a tar archive, the format `ctr images import`, `podman load`
// and `docker load` read. It needs no registry, daemon or base image: the
// layer is built from the files given, so static binaries make a complete
// image.
package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"
)

// File is one regular file of the image's layer.
type File struct {
	Path string // absolute path inside the image, e.g. /opt/podnet/bin/podnet
	Mode fs.FileMode
	Data []byte
}

// Image is what Write puts into the archive.
type Image struct {
	// Name is the full reference the importer gives the image, e.g.
	// podnet.test/podnet:dev. Runtimes normalise a reference without a
	// registry host to docker.io/library/..., so use one with a host.
	Name       string
	Files      []File
	Dirs       []string // extra empty directories, e.g. /tmp (mode 1777)
	Entrypoint []string
	Cmd        []string
	Env        []string
	// Arch is the GOARCH the binaries are built for (default: runtime.GOARCH).
	Arch string
}

// epoch is every entry's mtime: the same files give the same digests.
var epoch = time.Unix(0, 0)

const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type blob struct {
	digest string
	data   []byte
}

func newBlob(data []byte) blob {
	sum := sha256.Sum256(data)
	return blob{digest: "sha256:" + hex.EncodeToString(sum[:]), data: data}
}

func (b blob) path() string { return "blobs/sha256/" + strings.TrimPrefix(b.digest, "sha256:") }

// Layer returns the uncompressed layer tar of img: each file with the
// directories above it (0755, root-owned) and img.Dirs.
func Layer(img Image) ([]byte, error) {
	dirs := map[string]fs.FileMode{}
	var addParents func(p string)
	addParents = func(p string) {
		d := path.Dir(p)
		if d == "/" || d == "." {
			return
		}
		if _, ok := dirs[d]; !ok {
			dirs[d] = 0o755
		}
		addParents(d)
	}
	files := map[string]File{}
	for _, f := range img.Files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
			return nil, fmt.Errorf("image %s: file path %q is not a clean absolute path", img.Name, f.Path)
		}
		if _, dup := files[f.Path]; dup {
			return nil, fmt.Errorf("image %s: file %s given twice", img.Name, f.Path)
		}
		files[f.Path] = f
		addParents(f.Path)
	}
	for _, d := range img.Dirs {
		if !path.IsAbs(d) || path.Clean(d) != d {
			return nil, fmt.Errorf("image %s: directory %q is not a clean absolute path", img.Name, d)
		}
		addParents(d)
		mode := fs.FileMode(0o755)
		if d == "/tmp" {
			mode = 0o777 | fs.ModeSticky
		}
		dirs[d] = mode
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// Parents sort before their children, so every directory exists
	// before anything is written into it.
	var names []string
	for d := range dirs {
		names = append(names, d)
	}
	for p := range files {
		if _, isDir := dirs[p]; isDir {
			return nil, fmt.Errorf("image %s: %s is both a file and a directory", img.Name, p)
		}
		names = append(names, p)
	}
	sort.Strings(names)
	for _, n := range names {
		hdr := &tar.Header{Name: strings.TrimPrefix(n, "/"), ModTime: epoch, Format: tar.FormatPAX}
		if mode, isDir := dirs[n]; isDir {
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			hdr.Mode = int64(mode.Perm())
			if mode&fs.ModeSticky != 0 {
				hdr.Mode |= 0o1000
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, err
			}
			continue
		}
		f := files[n]
		hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, int64(f.Mode.Perm()), int64(len(f.Data))
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Write writes img to w as a tar of an OCI image layout: oci-layout,
// index.json naming the image (io.containerd.image.name for containerd,
// org.opencontainers.image.ref.name for the rest) and the blobs.
func Write(w io.Writer, img Image) error {
	if img.Name == "" || !strings.Contains(img.Name, ":") {
		return fmt.Errorf("image name %q: want REPOSITORY:TAG", img.Name)
	}
	arch := img.Arch
	if arch == "" {
		arch = runtime.GOARCH
	}
	layerData, err := Layer(img)
	if err != nil {
		return err
	}
	layer := newBlob(layerData)
	env := img.Env
	if env == nil {
		env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	cfgJSON, err := json.Marshal(map[string]any{
		"architecture": arch,
		"os":           "linux",
		"created":      epoch.UTC().Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": img.Entrypoint,
			"Cmd":        img.Cmd,
			"Env":        env,
			"WorkingDir": "/",
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layer.digest}},
	})
	if err != nil {
		return err
	}
	cfg := newBlob(cfgJSON)
	manJSON, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaManifest,
		"config":        descriptor{MediaType: mediaConfig, Digest: cfg.digest, Size: int64(len(cfg.data))},
		"layers":        []descriptor{{MediaType: mediaLayer, Digest: layer.digest, Size: int64(len(layer.data))}},
	})
	if err != nil {
		return err
	}
	man := newBlob(manJSON)
	tag := img.Name[strings.LastIndex(img.Name, ":")+1:]
	idxJSON, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaIndex,
		"manifests": []descriptor{{
			MediaType: mediaManifest, Digest: man.digest, Size: int64(len(man.data)),
			Annotations: map[string]string{
				"io.containerd.image.name":          img.Name,
				"org.opencontainers.image.ref.name": tag,
			},
			Platform: &platform{Architecture: arch, OS: "linux"},
		}},
	})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", idxJSON},
		{layer.path(), layer.data},
		{cfg.path(), cfg.data},
		{man.path(), man.data},
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.data)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}
