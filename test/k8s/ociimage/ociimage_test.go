package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"testing"
)

// TestWrite reads an archive back as an importer does: index.json to the
// manifest, the manifest to the config and the layer, each blob found by
// its digest and matching it, and the layer holding the files with their
// directories.
func TestWrite(t *testing.T) {
	var buf bytes.Buffer
	img := Image{
		Name:       "podnet.test/x:1",
		Entrypoint: []string{"/opt/x/bin/x"},
		Dirs:       []string{"/tmp"},
		Files:      []File{{Path: "/opt/x/bin/x", Mode: 0o755, Data: []byte("binary")}},
		Symlinks:   []Symlink{{Path: "/usr/bin/x", Target: "/opt/x/bin/x"}},
	}
	if err := Write(&buf, img); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[h.Name] = data
	}
	blob := func(d descriptor) []byte {
		t.Helper()
		data, ok := files["blobs/sha256/"+d.Digest[len("sha256:"):]]
		if !ok {
			t.Fatalf("blob %s missing", d.Digest)
		}
		sum := sha256.Sum256(data)
		if "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || int64(len(data)) != d.Size {
			t.Fatalf("blob %s: content does not match its descriptor", d.Digest)
		}
		return data
	}
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout = %q", files["oci-layout"])
	}
	var idx struct{ Manifests []descriptor }
	if err := json.Unmarshal(files["index.json"], &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index.json %s: %v", files["index.json"], err)
	}
	if n := idx.Manifests[0].Annotations["io.containerd.image.name"]; n != img.Name {
		t.Fatalf("image name %q, want %q", n, img.Name)
	}
	var man struct {
		Config descriptor
		Layers []descriptor
	}
	if err := json.Unmarshal(blob(idx.Manifests[0]), &man); err != nil || len(man.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	var cfg struct {
		Config struct{ Entrypoint []string }
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(blob(man.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != man.Layers[0].Digest {
		t.Fatalf("diff_ids %v, layer %s (uncompressed: must be equal)", cfg.RootFS.DiffIDs, man.Layers[0].Digest)
	}
	if len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/opt/x/bin/x" {
		t.Fatalf("entrypoint %v", cfg.Config.Entrypoint)
	}
	var names []string
	modes := map[string]int64{}
	links := map[string]string{}
	lr := tar.NewReader(bytes.NewReader(blob(man.Layers[0])))
	for {
		h, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		modes[h.Name] = h.Mode
		if h.Typeflag == tar.TypeSymlink {
			links[h.Name] = h.Linkname
		}
	}
	want := []string{"opt/", "opt/x/", "opt/x/bin/", "opt/x/bin/x", "tmp/", "usr/", "usr/bin/", "usr/bin/x"}
	if len(names) != len(want) {
		t.Fatalf("layer entries %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("layer entries %v, want %v", names, want)
		}
	}
	if modes["tmp/"] != 0o1777 || modes["opt/x/bin/x"] != 0o755 {
		t.Fatalf("modes %v", modes)
	}
	if len(links) != 1 || links["usr/bin/x"] != "/opt/x/bin/x" {
		t.Fatalf("links %v, want usr/bin/x -> /opt/x/bin/x", links)
	}
}

func TestWriteRejects(t *testing.T) {
	for _, img := range []Image{
		{Name: "noTag"},
		{Name: "a/b:1", Files: []File{{Path: "relative"}}},
		{Name: "a/b:1", Files: []File{{Path: "/x"}, {Path: "/x"}}},
		{Name: "a/b:1", Files: []File{{Path: "/x/../y"}}},
		{Name: "a/b:1", Files: []File{{Path: "/x"}}, Symlinks: []Symlink{{Path: "/x", Target: "y"}}},
		{Name: "a/b:1", Files: []File{{Path: "/x/y"}}, Symlinks: []Symlink{{Path: "/x", Target: "z"}}},
		{Name: "a/b:1", Symlinks: []Symlink{{Path: "/x", Target: ""}}},
	} {
		if err := Write(io.Discard, img); err == nil {
			t.Errorf("Write(%+v) succeeded", img)
		}
	}
}
