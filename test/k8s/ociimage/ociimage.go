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

// Symlink is one symbolic link of the image's layer: a multi-call
// program's applets (busybox's sh, cat, ...) without a copy each.
type Symlink struct {
	Path   string // absolute path inside the image, e.g. /bin/sh
	Target string // what the link holds, e.g. busybox or /bin/busybox
}

// Image is what Write puts into the archive.
type Image struct {
	// Name is the full reference the importer gives the image, e.g.
	// podnet.test/podnet:dev. Runtimes normalise a reference without a
	// registry host to docker.io/library/..., so use one with a host.
	Name       string
	Files      []File
	Dirs       []string // extra empty directories, e.g. /tmp (mode 1777)
	Symlinks   []Symlink
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

// Layer returns the uncompressed layer tar of img: each file and link
// with the directories above it (0755, root-owned) and img.Dirs.
func Layer(img Image) ([]byte, error) {
	files, dirs, err := layerTree(img)
	if err != nil {
		return nil, err
	}
	links, err := layerLinks(img, files, dirs)
	if err != nil {
		return nil, err
	}
	return writeLayer(files, dirs, links)
}

// layerLinks checks img's links against its files and directories and
// returns them by path, adding the directories above them to dirs.
func layerLinks(img Image, files map[string]File, dirs map[string]fs.FileMode) (map[string]string, error) {
	links := map[string]string{}
	for _, l := range img.Symlinks {
		if !path.IsAbs(l.Path) || path.Clean(l.Path) != l.Path || l.Target == "" {
			return nil, fmt.Errorf("image %s: link %q -> %q: want a clean absolute path and a target", img.Name, l.Path, l.Target)
		}
		_, isFile := files[l.Path]
		_, isDir := dirs[l.Path]
		_, dup := links[l.Path]
		if isFile || isDir || dup {
			return nil, fmt.Errorf("image %s: link %s is given twice or is also a file or directory", img.Name, l.Path)
		}
		links[l.Path] = l.Target
	}
	for p := range links {
		addParents(dirs, p)
	}
	for p := range links {
		if _, isDir := dirs[p]; isDir {
			return nil, fmt.Errorf("image %s: link %s has entries below it", img.Name, p)
		}
	}
	return links, nil
}

// layerTree checks img's paths and returns its files by path and every
// directory the layer holds with its mode. A tar without the parent
// directories would leave their modes to the importer.
func layerTree(img Image) (map[string]File, map[string]fs.FileMode, error) {
	dirs := map[string]fs.FileMode{}
	files := map[string]File{}
	for _, f := range img.Files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
			return nil, nil, fmt.Errorf("image %s: file path %q is not a clean absolute path", img.Name, f.Path)
		}
		if _, dup := files[f.Path]; dup {
			return nil, nil, fmt.Errorf("image %s: file %s given twice", img.Name, f.Path)
		}
		files[f.Path] = f
		addParents(dirs, f.Path)
	}
	for _, d := range img.Dirs {
		if !path.IsAbs(d) || path.Clean(d) != d {
			return nil, nil, fmt.Errorf("image %s: directory %q is not a clean absolute path", img.Name, d)
		}
		addParents(dirs, d)
		mode := fs.FileMode(0o755)
		if d == "/tmp" {
			mode = 0o777 | fs.ModeSticky
		}
		dirs[d] = mode
	}
	for p := range files {
		if _, isDir := dirs[p]; isDir {
			return nil, nil, fmt.Errorf("image %s: %s is both a file and a directory", img.Name, p)
		}
	}
	return files, dirs, nil
}

// addParents records every directory above p that is not recorded yet,
// with mode 0755; one already there keeps the mode it was given.
func addParents(dirs map[string]fs.FileMode, p string) {
	for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
		if _, ok := dirs[d]; !ok {
			dirs[d] = 0o755
		}
	}
}

// writeLayer writes the tar of files and dirs, sorted by path: parents
// sort before their children, so every directory exists before anything
// is written into it.
func writeLayer(files map[string]File, dirs map[string]fs.FileMode, links map[string]string) ([]byte, error) {
	var names []string
	for d := range dirs {
		names = append(names, d)
	}
	for p := range files {
		names = append(names, p)
	}
	for p := range links {
		names = append(names, p)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		var err error
		if mode, isDir := dirs[n]; isDir {
			err = writeDirEntry(tw, n, mode)
		} else if target, isLink := links[n]; isLink {
			hdr := layerHeader(n)
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, target, 0o777
			err = tw.WriteHeader(hdr)
		} else {
			err = writeFileEntry(tw, n, files[n])
		}
		if err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// layerHeader is the header every layer entry starts from: a relative
// name and a fixed mtime, so the same files give the same digests.
func layerHeader(p string) *tar.Header {
	return &tar.Header{Name: strings.TrimPrefix(p, "/"), ModTime: epoch, Format: tar.FormatPAX}
}

func writeDirEntry(tw *tar.Writer, p string, mode fs.FileMode) error {
	hdr := layerHeader(p)
	hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
	hdr.Mode = int64(mode.Perm())
	// fs.FileMode keeps the sticky bit outside Perm; tar wants it as the
	// Unix bit.
	if mode&fs.ModeSticky != 0 {
		hdr.Mode |= 0o1000
	}
	return tw.WriteHeader(hdr)
}

func writeFileEntry(tw *tar.Writer, p string, f File) error {
	hdr := layerHeader(p)
	hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, int64(f.Mode.Perm()), int64(len(f.Data))
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := tw.Write(f.Data)
	return err
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
	cfg, err := configBlob(img, arch, layer)
	if err != nil {
		return err
	}
	man, err := manifestBlob(cfg, layer)
	if err != nil {
		return err
	}
	index, err := indexJSON(img.Name, arch, man)
	if err != nil {
		return err
	}
	return writeLayout(w, index, layer, cfg, man)
}

// configBlob is the image configuration: how to run the image and the
// digest of its one uncompressed layer.
func configBlob(img Image, arch string, layer blob) (blob, error) {
	env := img.Env
	if env == nil {
		env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	data, err := json.Marshal(map[string]any{
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
	return newBlob(data), err
}

func manifestBlob(cfg, layer blob) (blob, error) {
	data, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaManifest,
		"config":        descriptor{MediaType: mediaConfig, Digest: cfg.digest, Size: int64(len(cfg.data))},
		"layers":        []descriptor{{MediaType: mediaLayer, Digest: layer.digest, Size: int64(len(layer.data))}},
	})
	return newBlob(data), err
}

// indexJSON names the manifest twice: containerd imports by
// io.containerd.image.name (the full reference), the OCI tools by
// org.opencontainers.image.ref.name (the tag).
func indexJSON(name, arch string, man blob) ([]byte, error) {
	tag := name[strings.LastIndex(name, ":")+1:]
	return json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaIndex,
		"manifests": []descriptor{{
			MediaType: mediaManifest, Digest: man.digest, Size: int64(len(man.data)),
			Annotations: map[string]string{
				"io.containerd.image.name":          name,
				"org.opencontainers.image.ref.name": tag,
			},
			Platform: &platform{Architecture: arch, OS: "linux"},
		}},
	})
}

// writeLayout writes the layout's tar: oci-layout, index.json, then the
// blobs under blobs/sha256/ in the order given.
func writeLayout(w io.Writer, index []byte, blobs ...blob) error {
	tw := tar.NewWriter(w)
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	if err := writeLayoutFile(tw, "oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := writeLayoutFile(tw, "index.json", index); err != nil {
		return err
	}
	for _, b := range blobs {
		if err := writeLayoutFile(tw, b.path(), b.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

func writeLayoutFile(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}
